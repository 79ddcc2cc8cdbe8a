"""EASD as a model of EleutherAI's lm-evaluation-harness (lm-eval 0.4.13), named "easd".

`python -m easd lm-eval --model_args pair=NAME,method=easd,tau_h=1.5 --tasks …` imports this
module (which registers the model) and hands the rest of its command line to lm-eval's own CLI,
since lm-eval has no plugin discovery. lm-eval is an extra (requirements-research.txt): the
engine and the app never import this module.

Only `generate_until` is served: EASD changes how tokens are drawn, not how a text is scored, so
the log-likelihood requests refuse with a clear message.
"""

from __future__ import annotations

import dataclasses
import logging
import re

from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs

from ...errors import EasdError, SettingsError
from ...method.generation import Generation
from ...method.methods import METHODS, knobs, make_settings
from ...method.pair import ModelPair
from ...method.settings import DecodeSettings
from ...method.step import Batch
from .evaluate import DEFAULT_BATCH_SIZE

MODEL_NAME = "easd"
DEFAULT_MAX_GEN_TOKS = 256  # lm-eval's own default when a task names none
SAMPLING_ARGS = ("until", "max_gen_toks", "do_sample", "temperature", "top_p")  # the generation kwargs we honour


def setting_args() -> list[str]:
    """The model_args that become settings: every setting (easd.method.methods.knobs, a method's own included) but
    those lm-eval sets per request from a task's generation kwargs (max_gen_toks, temperature, top_p)."""
    return [name for name, knob in knobs().items() if not knob.per_request and name != "record_top"]


log = logging.getLogger(__name__)


@register_model(MODEL_NAME)
class EasdLM(LM):
    """model_args: pair, backend, dtype, int8, and every setting but those a task's generation kwargs set (`setting_args`):
    method (one the batch decodes), rule, k, tau_h, tau_o, top_n, seed, signals, and each method's own (mti_tau, …)."""

    def __init__(
        self,
        pair: str | None = None,
        backend: str = "auto",
        dtype: str = "auto",
        int8: str = "none",
        batch_size=None,  # rows decoded together; lm-eval's "auto" (or none) means our default
        max_batch_size=None,
        device=None,
        **settings,
    ):
        super().__init__()
        self.base = settings_from_model_args(settings)
        from ...pairs.loading import Runtime
        from ...pairs.registry import default_pair_name, load_named_pair

        try:
            runtime = Runtime(backend=str(backend), dtype=str(dtype), int8=str(int8))
            self.pair: ModelPair = load_named_pair(str(pair or default_pair_name()), runtime)
        except EasdError as err:  # name the model_args the user typed, not our own CLI's flags
            raise EasdError(re.sub(r"^--([a-z0-9]+)", r"--model_args \1", str(err))) from None
        self._device = self.pair.device
        self.rows = int(batch_size) if str(batch_size).isdigit() and int(batch_size) > 0 else DEFAULT_BATCH_SIZE
        self._warned: set[str] = set()

    # --- the one request type a decoding method serves -------------------------------------------

    def generate_until(self, requests) -> list[str]:
        jobs = [(request.args[0], *self.request_settings(request.args[1])) for request in requests]
        outputs = decode_until(self.pair, jobs, self.rows, progress=f"easd ({self.base.method})")
        for request, text in zip(requests, outputs):
            self.cache_hook.add_partial("generate_until", request.args, text)
        return outputs

    def request_settings(self, gen_kwargs: dict) -> tuple[DecodeSettings, list[str]]:
        """The run's settings for one request, from lm-eval's generation kwargs; and its stop strings."""
        kwargs = normalize_gen_kwargs(dict(gen_kwargs), DEFAULT_MAX_GEN_TOKS)
        # no end-of-sequence string: the engine stops at the pair's end tokens itself, and they are not in the text
        until = handle_stop_sequences(kwargs.get("until"), eos=None)
        ignored = sorted(set(kwargs) - set(SAMPLING_ARGS) - self._warned)
        if ignored:  # e.g. top_k: the engine samples with temperature and top-p only
            log.warning("easd: ignoring generation kwargs it does not support: %s", ", ".join(ignored))
            self._warned |= set(ignored)
        sampling = bool(kwargs.get("do_sample")) and float(kwargs.get("temperature") or 0.0) > 0
        settings = dataclasses.replace(
            self.base,
            max_new_tokens=int(kwargs["max_gen_toks"]),
            temperature=float(kwargs["temperature"]) if sampling else 0.0,
            top_p=float(kwargs.get("top_p") or 1.0) if sampling else 1.0,
        )
        return settings, until

    def loglikelihood(self, requests):
        raise _not_a_decoding_task("loglikelihood (multiple-choice and scoring tasks)")

    def loglikelihood_rolling(self, requests):
        raise _not_a_decoding_task("loglikelihood_rolling (perplexity tasks)")

    # --- chat templates: lm-eval formats the chat itself with --apply_chat_template ---------------

    @property
    def tokenizer_name(self) -> str:
        return self.pair.target_name.replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return self.pair.tokenizer.chat_template

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.pair.tokenizer.render_chat(chat_history, add_generation_prompt=add_generation_prompt)


def decode_until(pair: ModelPair, jobs: list[tuple[str, DecodeSettings, list[str]]], rows: int, progress: str = "") -> list[str]:
    """Requests (context, settings, stop strings) as the rows of one batch of up to `rows` rows: per request,
    the text generated after its context, cut before its first stop string.

    Contexts arrive formatted (lm-eval applies any chat template itself), so they go in as raw
    text. A row stops at the block where a stop string appears, not at its max_new_tokens.
    """
    from tqdm import tqdm

    generations = [Generation(pair, context, settings, chat=False) for context, settings, _ in jobs]
    stops = {id(g): until for g, (_, _, until) in zip(generations, jobs)}
    text = lambda g: pair.tokenizer.decode(g.trace.token_ids)
    with tqdm(total=len(jobs), desc=progress, disable=len(jobs) < 2) as bar:
        for block in Batch(pair, generations, max_rows=rows):
            row = block.generation
            if any(stop in text(row) for stop in stops[id(row)] if stop):
                row.stop()
            bar.update(row.done or row.stopped)
    return [cut_at_stops(text(g), until) for g, (_, _, until) in zip(generations, jobs)]


def cut_at_stops(text: str, until: list[str]) -> str:
    """The text before the earliest stop string (lm-eval's rule)."""
    cut = min((text.find(stop) for stop in until if stop and stop in text), default=len(text))
    return text[:cut]


def settings_from_model_args(values: dict) -> DecodeSettings:
    """DecodeSettings from lm-eval's model_args, with errors named as the model_args the user typed."""
    unknown = sorted(set(values) - set(setting_args()))
    if unknown:
        known = ", ".join(("pair", "dtype", "int8", *setting_args()))
        raise EasdError(f"--model_args: unknown {', '.join(unknown)}; the easd model takes {known}")
    try:
        settings = make_settings(values).validate()  # method: the settings' default (EASD) unless given
        if settings.method not in METHODS:
            raise SettingsError("method", f"must be one of {', '.join(METHODS)} (got {settings.method!r})")
        return settings
    except SettingsError as err:
        raise EasdError(f"--model_args {err.setting}: {err.message}") from None


def _not_a_decoding_task(kind: str) -> EasdError:
    return EasdError(
        f"lm-eval: the easd model does not compute {kind}: EASD is a decoding method; "
        "choose generate_until tasks (e.g. gsm8k_cot_zeroshot, minerva_math)"
    )
