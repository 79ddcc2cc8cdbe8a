"""The page: builders return component handles, and every event is wired in `build_app`.

Handlers only render traces (lanes, inspector, figures, stepper) and hand work to the engine;
none of them re-implements the method. Per-user data lives in a `gr.State(Session)`; the model
pairs live in the `ModelHost` passed in.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import gradio as gr

from easd.core import trace as trace_io
from easd.core.compare import LANES, Comparison
from easd.core.whatif import would_penalize
from easd.errors import EasdError

from . import evaluation, figures
from .backend import ModelHost
from .controls import Controls, build_controls, overlap_meaning, settings_from
from .evaluation import EvaluationTab, build_evaluation_tab
from .inspector import inspector_html
from .lanes import lane_html, lane_title, legend_html
from .session import Session
from .stats import comparison_markdown, stats_markdown
from .stepper import block_views, stepper_html

N_OUTPUTS = 3 * len(LANES) + 1 + 5 + 2 + 1  # lanes, panels, files, message: Page.everything()
LANES_EVERY_S = 0.25  # at most four lane updates a second: faster only floods the browser with HTML
FIGURES_EVERY_S = 2.0  # figures redraw less often: a figure per token made the browser fall behind
LANE_JS = """
element.addEventListener('click', (event) => {
  const span = event.target.closest('span[data-pos]');
  if (span) trigger('token_click', {lane: span.dataset.lane, pos: parseInt(span.dataset.pos)});
});
"""
INTRO = (
    "**Speculative decoding (SD)** lets a small *draft* model propose a few tokens that a large *target* model "
    "checks in one pass, keeping exactly the target's output distribution. **Entropy-aware SD (EASD)** adds one "
    "rule: when both models are uncertain (high entropy) yet agree (their top-n candidates overlap), the drafted "
    "token is refused and the target picks another. Both runs below share the prompt, seed and settings, so they "
    "are identical up to EASD's first penalty (marked *fork›*), and every difference after it comes from the penalty."
)


@dataclass
class Page:
    """Every component a handler reads or writes."""

    state: gr.State
    pair: gr.Dropdown
    status: gr.Markdown
    prompt: gr.Textbox
    generate: gr.Button
    stop: gr.Button
    clear: gr.Button
    message: gr.Markdown
    controls: Controls
    titles: dict
    lanes: dict
    stats: dict
    comparison: gr.Markdown
    inspector: gr.HTML
    step_lane: gr.Radio
    step_prev: gr.Button
    step_next: gr.Button
    stepper: gr.HTML
    timeline: gr.Plot
    heatmap: gr.Plot
    whatif: gr.Plot
    download_csv: gr.DownloadButton
    download_json: gr.DownloadButton
    upload: gr.UploadButton
    timer: gr.Timer

    def lane_outputs(self) -> list:
        return [c for lane in LANES for c in (self.titles[lane], self.lanes[lane], self.stats[lane])] + [self.comparison]

    def panel_outputs(self) -> list:
        return [self.inspector, self.timeline, self.heatmap, self.whatif, self.stepper]

    def file_outputs(self) -> list:
        return [self.download_csv, self.download_json]

    def everything(self) -> list:
        return self.lane_outputs() + self.panel_outputs() + self.file_outputs() + [self.message]


# --- rendering a session ------------------------------------------------------------------------


def render_lanes(session: Session, tau_h: float, tau_o: float, top_n: int, rule: str) -> list:
    traces, fork = session.traces, session.fork
    marks = _whatif_marks(session, tau_h, tau_o, top_n, rule)
    out = []
    for lane in LANES:
        selected = session.selected[1] if session.selected and session.selected[0] == lane else None
        html = lane_html(
            lane, traces[lane], selected=selected, fork=fork, whatif=marks if lane == "sd" else None, running=session.running
        )
        out += [f"### {lane_title(lane, traces[lane])}", html, stats_markdown(traces[lane])]
    return out + [comparison_markdown(traces["sd"], traces["easd"], fork) if not session.running else ""]


def _whatif_marks(session: Session, tau_h, tau_o, top_n, rule):
    sd = session.traces["sd"]
    if sd is None or session.running or sd.settings.method != "sd":
        return None
    return would_penalize(sd, rule, tau_h, tau_o, int(top_n))


def render_panels(session: Session, tau_h: float, tau_o: float, top_n: int, rule: str) -> list:
    lane, record = session.selected_record()
    focus_lane = lane or "easd"
    trace = session.traces.get(focus_lane) or session.traces["sd"]
    position = record.position if record is not None else None
    views = block_views(session.traces.get(session.step_lane))
    return [
        inspector_html(lane, record, rule, tau_h, tau_o, int(top_n)),
        figures.signal_timeline(trace, tau_h, tau_o, int(top_n), position),
        figures.topk_heatmap(trace, position),
        figures.whatif_map(session.traces["sd"] if not session.running else None, rule, int(top_n), tau_h, tau_o),
        stepper_html(lane_title(session.step_lane, session.traces.get(session.step_lane)), views, session.step),
    ]


def render_files(session: Session) -> list:
    paths = None if session.running else session.export()
    if paths is None:
        return [gr.DownloadButton(value=None, interactive=False)] * 2
    return [gr.DownloadButton(value=path, interactive=True) for path in paths]


def render_all(session: Session, tau_h, tau_o, top_n, rule, message: str = "") -> list:
    args = (session, tau_h, tau_o, top_n, rule)
    return render_lanes(*args) + render_panels(*args) + render_files(session) + [message]


# --- building the page --------------------------------------------------------------------------


def build_page(host: ModelHost, examples: list[str]) -> Page:
    state = gr.State(Session(), time_to_live=3600)
    gr.Markdown("# EASD Lab: SD and entropy-aware SD, side by side")
    gr.Markdown(INTRO)
    with gr.Row():
        with gr.Column(scale=3):
            prompt = gr.Textbox(
                label="Prompt", lines=4, placeholder="Ask a math word problem or a coding question…", elem_id="prompt"
            )
            gr.Examples(examples=[[e] for e in examples], inputs=[prompt], label="Examples")
            with gr.Row():
                generate = gr.Button("Generate", variant="primary", interactive=False, elem_id="generate")
                stop = gr.Button("Stop", variant="stop", elem_id="stop")
                clear = gr.Button("Clear", elem_id="clear")
            message = gr.Markdown(elem_id="message")
        with gr.Column(scale=2):
            names = list(host.allowed)
            pair = gr.Dropdown(
                names,
                value=host.default,
                label="Model pair (allowed by the operator)",
                elem_id="pair",
                interactive=len(names) > 1,
            )
            status = gr.Markdown("Starting…", elem_id="status")
            controls = build_controls(host.max_new_tokens_cap)
    gr.HTML(legend_html())
    titles, lanes, stats = {}, {}, {}
    with gr.Row(equal_height=False):
        for lane in LANES:
            with gr.Column():
                titles[lane] = gr.Markdown(f"### {lane_title(lane, None)}")
                lanes[lane] = gr.HTML(lane_html(lane, None), js_on_load=LANE_JS, elem_id=f"lane_{lane}", elem_classes=["lane"])
                stats[lane] = gr.Markdown(elem_id=f"stats_{lane}")
    comparison = gr.Markdown(elem_id="comparison")
    with gr.Row(equal_height=False):
        with gr.Column():
            gr.Markdown("### Inspector")
            inspector = gr.HTML(inspector_html("", None, "full", 1.0, 0.8, 5), elem_id="inspector")
        with gr.Column():
            gr.Markdown("### Step through the blocks")
            with gr.Row():
                step_lane = gr.Radio([("SD", "sd"), ("EASD", "easd")], value="easd", show_label=False, elem_id="step_lane")
                step_prev = gr.Button("◀ previous block", elem_id="step_prev", size="sm")
                step_next = gr.Button("next block ▶", elem_id="step_next", size="sm")
            stepper = gr.HTML(stepper_html("", [], 0), elem_id="stepper")
    with gr.Tabs():
        with gr.Tab("Signal timeline"):
            timeline = gr.Plot(figures.empty_figure(), show_label=False, elem_id="timeline")
        with gr.Tab("Top-5 heatmap"):
            heatmap = gr.Plot(figures.empty_figure(), show_label=False, elem_id="heatmap")
        with gr.Tab("What-if map"):
            whatif = gr.Plot(figures.empty_figure(), show_label=False, elem_id="whatif")
    with gr.Row():
        download_csv = gr.DownloadButton("Download trace (CSV)", interactive=False, elem_id="download_csv")
        download_json = gr.DownloadButton("Download trace (JSON)", interactive=False, elem_id="download_json")
        upload = gr.UploadButton(
            "Load a trace file (.csv / .json)", file_types=[".csv", ".json"], type="filepath", elem_id="upload"
        )
    timer = gr.Timer(1.0)
    return Page(
        state,
        pair,
        status,
        prompt,
        generate,
        stop,
        clear,
        message,
        controls,
        titles,
        lanes,
        stats,
        comparison,
        inspector,
        step_lane,
        step_prev,
        step_next,
        stepper,
        timeline,
        heatmap,
        whatif,
        download_csv,
        download_json,
        upload,
        timer,
    )


# --- the handlers -------------------------------------------------------------------------------


def make_handlers(host: ModelHost):
    """The functions events call, closed over the host (the only shared, read-only data)."""

    def generate(
        pair_name, prompt, chat, tau_h, tau_o, top_n, k, temperature, top_p, max_new_tokens, rule, seed, session: Session
    ):
        whatif_args = (tau_h, tau_o, top_n, rule)
        try:
            settings = settings_from(tau_h, tau_o, top_n, k, temperature, top_p, max_new_tokens, rule, seed)
            pair = _ready_pair(host, pair_name)
            comparison = Comparison(pair, prompt, settings, chat=chat)
        except EasdError as err:
            yield _only_message(f"⚠️ {err}")
            return
        with host.gate:  # released when the stream ends, is stopped, or the tab closes
            session.clear()
            session.traces, session.running = comparison.traces, True
            lanes_shown = figures_shown = time.monotonic()
            try:
                for _ in comparison:
                    now = time.monotonic()
                    if now - lanes_shown < LANES_EVERY_S:
                        continue
                    lanes_shown = now
                    panels = [gr.skip()] * 5
                    if now - figures_shown >= FIGURES_EVERY_S:
                        panels, figures_shown = render_panels(session, *whatif_args), now
                    yield render_lanes(session, *whatif_args) + panels + [gr.skip()] * 2 + [""]
            finally:
                session.running = False
        yield render_all(session, *whatif_args, message=f"Done: {_stop_note(session)}")

    def compare(
        prompt: str,
        tau_h: float = 1.0,
        tau_o: float = 0.8,
        top_n: int = 5,
        k: int = 4,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_new_tokens: int = 64,
        rule: str = "full",
        seed: int = 0,
        pair: str = "",
        chat: bool = True,
    ) -> dict:
        """Run SD and EASD with the same prompt, seed and settings; returns both traces (easd-trace JSON)."""
        try:
            settings = settings_from(
                tau_h, tau_o, top_n, k, temperature, top_p, min(max_new_tokens, host.max_new_tokens_cap), rule, seed
            )
            loaded = _ready_pair(host, pair or host.default)
            with host.gate:
                traces = Comparison(loaded, prompt, settings, chat=chat).run()
        except EasdError as err:
            raise gr.Error(str(err)) from None
        return trace_io.to_json_dict(list(traces.values()))

    def stop_render(tau_h, tau_o, top_n, rule, session: Session):
        session.running = False
        return render_all(session, tau_h, tau_o, top_n, rule, message=f"Stopped: {_stop_note(session)}")

    def clear(tau_h, tau_o, top_n, rule, session: Session):
        session.clear()
        return render_all(session, tau_h, tau_o, top_n, rule) + [""]

    def rerender(tau_h, tau_o, top_n, rule, session: Session):
        return (
            render_lanes(session, tau_h, tau_o, top_n, rule)
            + render_panels(session, tau_h, tau_o, top_n, rule)
            + [overlap_meaning(tau_o, top_n)]
        )

    def select_token(tau_h, tau_o, top_n, rule, session: Session, event: gr.EventData):
        data = getattr(event, "_data", None) or {}
        lane, position = data.get("lane"), data.get("pos")
        if lane in LANES and isinstance(position, int):
            session.select(lane, position)
        return render_lanes(session, tau_h, tau_o, top_n, rule) + render_panels(session, tau_h, tau_o, top_n, rule)

    def step(delta: int):
        def move(step_lane, session: Session):
            views = block_views(session.traces.get(step_lane))
            session.step = 0 if step_lane != session.step_lane else min(max(session.step + delta, 0), max(len(views) - 1, 0))
            session.step_lane = step_lane
            return stepper_html(lane_title(step_lane, session.traces.get(step_lane)), views, session.step)

        return move

    def load_file(path, tau_h, tau_o, top_n, rule, session: Session):
        try:
            traces = trace_io.load(path)
            if not traces:
                raise EasdError("the file holds no runs")
            note = session.load_traces(traces, _file_name(path))
        except EasdError as err:
            return _only_message(f"⚠️ Could not load that file: {err}")
        return render_all(session, tau_h, tau_o, top_n, rule, message=note)

    def poll(pair_name):
        if pair_name is None:
            return (
                "No model pair is loaded here: load a trace file to view it.",
                gr.Button(interactive=False),
                gr.Timer(active=False),
            )
        state = host.ensure_loading(pair_name)
        ready = state.status == "ready"
        text = f"**{pair_name}**: {state.describe()}" + (f"\n\n{state.pair.note}" if ready and state.pair.note else "")
        return text, gr.Button(interactive=ready), gr.Timer(active=state.status == "loading")

    return dict(
        generate=generate,
        compare=compare,
        stop_render=stop_render,
        clear=clear,
        rerender=rerender,
        select_token=select_token,
        step=step,
        load_file=load_file,
        poll=poll,
    )


def _only_message(message: str) -> list:
    return [gr.skip()] * (N_OUTPUTS - 1) + [message]


def _ready_pair(host: ModelHost, name: str | None):
    if name is None or name not in host.allowed:
        raise EasdError("no model pair is available here; this app can only view trace files")
    pair = host.pair(name)
    if pair is None:
        raise EasdError(f"the pair {name} is not ready yet ({host.states[name].describe()})")
    return pair


def _stop_note(session: Session) -> str:
    counts = [
        f"{lane.upper()} {len(t.records)} tokens ({t.stats.stop_reason})" for lane, t in session.traces.items() if t is not None
    ]
    return ", ".join(counts)


def _file_name(path) -> str:
    return str(path).replace("\\", "/").rsplit("/", 1)[-1]


# --- the app --------------------------------------------------------------------------------------


def build_app(host: ModelHost, examples: list[str], gpu=lambda fn: fn, eval_dirs: list[str] | None = None) -> gr.Blocks:
    """The whole app. `gpu` wraps the generating functions (spaces.GPU on a ZeroGPU Space);
    `eval_dirs` are the evaluation folders the operator allows the Evaluation tab to open."""
    handlers = make_handlers(host)
    eval_dirs = list(eval_dirs or [])
    with gr.Blocks(title="EASD Lab", delete_cache=(3600, 7200)) as demo:
        with gr.Tab("Compare"):
            page = build_page(host, examples)
        with gr.Tab("Evaluation"):
            tab = build_evaluation_tab(eval_dirs)
        _wire_evaluation(tab, eval_dirs)
        c, s = page.controls, page.state
        whatif_in = c.whatif_inputs()
        private = dict(api_visibility="private")
        instant = dict(private, concurrency_limit=None, show_progress="hidden", queue=False)

        run = page.generate.click(
            gpu(handlers["generate"]),
            [page.pair, page.prompt, c.chat, *c.inputs(), s],
            page.everything(),
            concurrency_id="generate",
            concurrency_limit=host.concurrency,
            show_progress="hidden",
            **private,
        )
        page.stop.click(None, None, None, cancels=[run], **private).then(
            handlers["stop_render"], [*whatif_in, s], page.everything(), **private
        )
        page.clear.click(handlers["clear"], [*whatif_in, s], page.everything() + [page.prompt], cancels=[run], **private)
        for control in whatif_in:
            control.change(
                handlers["rerender"],
                [*whatif_in, s],
                page.lane_outputs() + page.panel_outputs() + [c.tau_o_meaning],
                trigger_mode="always_last",
                **instant,
            )
        for lane in LANES:
            page.lanes[lane].token_click(
                handlers["select_token"], [*whatif_in, s], page.lane_outputs() + page.panel_outputs(), **instant
            )
        page.step_prev.click(handlers["step"](-1), [page.step_lane, s], page.stepper, **instant)
        page.step_next.click(handlers["step"](+1), [page.step_lane, s], page.stepper, **instant)
        page.step_lane.change(handlers["step"](0), [page.step_lane, s], page.stepper, **instant)
        page.upload.upload(handlers["load_file"], [page.upload, *whatif_in, s], page.everything(), **private)
        for trigger in (demo.load, page.timer.tick, page.pair.change):
            trigger(handlers["poll"], [page.pair], [page.status, page.generate, page.timer], **instant)
        gr.api(gpu(handlers["compare"]), api_name="compare", concurrency_id="generate", concurrency_limit=host.concurrency)
    return demo


def _wire_evaluation(tab: EvaluationTab, eval_dirs: list[str]) -> None:
    private = dict(api_visibility="private")
    tab.folder.change(lambda folder: evaluation.load_folder(folder, eval_dirs), tab.folder, tab.outputs(), **private)
    tab.uploads.upload(evaluation.load_uploads, tab.uploads, tab.outputs(), **private)
    tab.problems.select(
        evaluation.show_answers, [tab.results, tab.left_method, tab.right_method], [tab.left_answer, tab.right_answer], **private
    )
