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

from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs

from ..core.decoding import Generation
from ..core.pair import ModelPair
from ..core.settings import DecodeSettings
from ..errors import EasdError, SettingsError

MODEL_NAME = "easd"
SETTING_ARGS = ("method", "rule", "k", "tau_h", "tau_o", "top_n", "seed")  # model_args that become DecodeSettings
DEFAULT_MAX_GEN_TOKS = 256  # lm-eval's own default when a task names none
SAMPLING_ARGS = ("until", "max_gen_toks", "do_sample", "temperature", "top_p")  # the generation kwargs we honour

log = logging.getLogger(__name__)


@register_model(MODEL_NAME)
class EasdLM(LM):
    """model_args: pair, method (target|draft|sd|easd), rule, k, tau_h, tau_o, top_n, seed, dtype, int8."""

    def __init__(
        self,
        pair: str | None = None,
        dtype: str = "auto",
        int8: str = "none",
        batch_size=None,  # lm-eval passes these to every model; requests run one at a time for now
        max_batch_size=None,
        device=None,
        **settings,
    ):
        super().__init__()
        self.base = settings_from_model_args(settings)
        from ..pairs.registry import default_pair_name, load_named_pair

        try:
            self.pair: ModelPair = load_named_pair(str(pair or default_pair_name()), str(dtype), str(int8))
        except EasdError as err:  # name the model_args the user typed, not our own CLI's flags
            raise EasdError(str(err).replace("--pair:", "--model_args pair:", 1)) from None
        self._device = self.pair.device
        self._warned: set[str] = set()

    # --- the one request type a decoding method serves -------------------------------------------

    def generate_until(self, requests) -> list[str]:
        from tqdm import tqdm

        outputs = []
        for request in tqdm(requests, desc=f"easd ({self.base.method})", disable=len(requests) < 2):
            context, gen_kwargs = request.args
            settings, until = self.request_settings(gen_kwargs)
            text = decode_until(self.pair, context, settings, until)
            outputs.append(text)
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
        return self.pair.tokenizer.apply_chat_template(
            chat_history,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=not add_generation_prompt,
        )


def decode_until(pair: ModelPair, context: str, settings: DecodeSettings, until: list[str]) -> str:
    """One request through the engine: the text generated after `context`, cut before the first stop string.

    The context arrives formatted (lm-eval applies any chat template itself), so it goes in as
    raw text. Decoding stops at the block where a stop string appears, not at max_new_tokens.
    """
    generation = Generation(pair, context, settings, chat=False)
    text = ""
    for _ in generation:
        text = pair.tokenizer.decode(generation.trace.token_ids, skip_special_tokens=True)
        if any(stop in text for stop in until if stop):
            generation.stop()
    return cut_at_stops(text, until)


def cut_at_stops(text: str, until: list[str]) -> str:
    """The text before the earliest stop string (lm-eval's rule)."""
    cut = min((text.find(stop) for stop in until if stop and stop in text), default=len(text))
    return text[:cut]


def settings_from_model_args(values: dict) -> DecodeSettings:
    """DecodeSettings from lm-eval's model_args, with errors named as the model_args the user typed."""
    unknown = sorted(set(values) - set(SETTING_ARGS))
    if unknown:
        known = ", ".join(("pair", "dtype", "int8", *SETTING_ARGS))
        raise EasdError(f"--model_args: unknown {', '.join(unknown)}; the easd model takes {known}")
    try:
        return DecodeSettings.from_dict({"method": "easd", **values}).validate()
    except SettingsError as err:
        name = err.flag.removeprefix("--").replace("-", "_")
        raise EasdError(str(err).replace(err.flag, f"--model_args {name}", 1)) from None
    except ValueError as err:
        raise EasdError(f"--model_args: {err}") from None


def _not_a_decoding_task(kind: str) -> EasdError:
    return EasdError(
        f"lm-eval: the easd model does not compute {kind}: EASD is a decoding method; "
        "choose generate_until tasks (e.g. gsm8k_cot_zeroshot, minerva_math)"
    )
