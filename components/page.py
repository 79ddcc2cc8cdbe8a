"""The Compare tab's components: built once by `build_page`, handed to every handler as a `Page`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gradio as gr
from gradio.utils import get_upload_folder

from easd.method.compare import DEFAULT_METHODS, LANES
from easd.method.methods import METHODS
from easd.method.whatif import RuleView
from easd.render import figures
from easd.render.html import tag
from easd.render.inspector import inspector_html
from easd.render.lanes import Spans, lane_html, lane_title, legend_html
from easd.render.stepper import stepper_html
from easd.serving.host import ModelHost

from .controls import Controls, build_controls
from .gallery import Gallery
from .rooms import Rooms
from .session import Session, Sessions

SESSION_TTL_S = 1800  # a session's traces and files go 30 minutes after its last run or load, or when its tab closes
# Tokens are selected by click or tap, and by keyboard: Tab reaches the lane's selected (or first) token,
# arrow keys move along the lane, Enter or Space selects. The lane is re-rendered after each selection,
# so the newly selected token gets the focus back once it arrives.
LANE_JS = """
const select = (span) => {
  element.dataset.refocus = span.dataset.pos;
  trigger('token_click', {lane: span.dataset.lane, pos: parseInt(span.dataset.pos)});
};
element.addEventListener('click', (event) => {
  const span = event.target.closest('span[data-pos]');
  if (span) select(span);
});
element.addEventListener('keydown', (event) => {
  const span = event.target.closest('span[data-pos]');
  if (!span) return;
  const step = {ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1}[event.key];
  if (event.key === 'Enter' || event.key === ' ') {
    event.preventDefault();
    select(span);
  } else if (step) {
    const spans = [...element.querySelectorAll('span[data-pos]')];
    const next = spans[spans.indexOf(span) + step];
    if (next) { event.preventDefault(); next.focus(); select(next); }
  }
});
new MutationObserver(() => {
  const wanted = element.dataset.refocus;
  const span = wanted && element.querySelector(`span.sel[data-pos="${wanted}"]`);
  if (span) { delete element.dataset.refocus; span.focus({preventScroll: true}); }
}).observe(element, {childList: true, subtree: true});
"""
# On a phone the inspector is a sheet over the bottom of the screen (assets/style.css); its button closes it. Under
# it, a recorded run's token has a link (components.links), which "copy link" puts on the clipboard.
INSPECTOR_JS = """
element.addEventListener('click', (event) => {
  if (event.target.closest('button.close')) trigger('token_click', {lane: '', pos: -1});
  const copy = event.target.closest('button.copy-link');
  if (!copy) return;
  const url = new URL(copy.dataset.href, location.href).href;
  const said = (text) => { copy.textContent = text; };
  if (navigator.clipboard) navigator.clipboard.writeText(url).then(() => said('✓ copied'), () => said('copy the link beside'));
  else said('copy the link beside');
});
"""
INTRO = (
    "**Speculative decoding (SD)** lets a small *draft* model propose a few tokens that a large *target* model "
    "checks in one pass, keeping exactly the target's output distribution. **Entropy-aware SD (EASD)** adds one "
    "rule: when both models are uncertain (high entropy) yet agree (their top-n candidates overlap), the drafted "
    "token is refused and the target picks another. Each column below is a **lane**: one method's run of the prompt, "
    "token by token, each token coloured by where it came from (the legend says which colour is what); pick a lane's "
    "method on its title line. Both lanes share the prompt, seed and settings, so SD and EASD are identical up to "
    "EASD's first penalty (marked *fork›*), and every difference after it comes from the penalty. Click a token to "
    "see why it was chosen."
)


@dataclass(kw_only=True)
class Page:
    """Every component a handler reads or writes. Handlers return dicts keyed by these."""

    state: gr.State
    pair: gr.Dropdown
    status: gr.Markdown
    prompt: gr.Textbox
    example: gr.Dropdown  # picking one fills the prompt and runs it
    recorded: gr.Dropdown  # picking one opens a recorded comparison from the gallery, no model needed
    generate: gr.Button
    stop: gr.Button
    clear: gr.Button
    present: gr.Button  # opens this page's room (components.rooms)
    message: gr.HTML
    fix: gr.Button  # under the message, a refused run's remedy: set the setting it names and run again (easd.errors.Fix)
    controls: Controls
    methods: dict[str, gr.Dropdown]  # by lane: the method it runs
    titles: dict[str, gr.HTML]  # by lane
    legend: gr.HTML  # what the lanes' methods may show
    guide: gr.Accordion  # "What am I looking at?": open on a first visit, folded once runs are shown
    lanes: dict[str, gr.HTML]
    stats: dict[str, gr.HTML]
    comparison: gr.HTML
    search: gr.Textbox  # a filter of tokens (easd.render.search); Enter steps to the next match
    search_prev: gr.Button
    search_next: gr.Button
    found: gr.HTML  # how many tokens match, or what a filter that cannot be read lacks
    inspector: gr.HTML
    step_lane: gr.Radio
    step_prev: gr.Button
    step_next: gr.Button
    stepper: gr.HTML
    figures: dict[str, gr.Plot]  # by name, see figures.FIGURES
    download_csv: gr.DownloadButton
    download_json: gr.DownloadButton
    make_html: gr.Button  # writes both lanes as one HTML file that opens offline (easd.render.export)
    html_file: gr.File  # that file, once made
    make_site: gr.Button  # writes both lanes as a static site, zipped, ready to publish (easd.lab.site)
    site_file: gr.File  # that zip, once made
    upload: gr.UploadButton
    timer: gr.Timer
    sessions: Sessions  # the open tabs' sessions, so a closed tab frees its own at once
    rooms: Rooms  # the rooms presenters opened, by code
    spans: Spans  # token spans, each rendered once for every page (easd.render.lanes)
    downloads: Path  # where sessions write their exports: inside Gradio's file cache, which serves them as they are

    def lane_outputs(self) -> list:
        return [*self.titles.values(), *self.lanes.values(), *self.stats.values(), self.comparison, self.found, self.legend]

    def panel_outputs(self) -> list:
        return [self.inspector, self.stepper, *self.figures.values()]

    def loaded(self) -> list:
        """Every output of runs opened from elsewhere (a file, the gallery, a room, the Evaluation tab): a full render,
        and the controls, which move to the runs' prompt and settings."""
        c = self.controls
        return [*self.everything(), self.prompt, *c.settings().values(), c.tau_o_meaning, *self.methods.values()]

    def everything(self) -> list:
        """Every output of a full render, the session included (setting it starts Gradio's time limit afresh)."""
        files = [self.download_csv, self.download_json, self.make_html, self.html_file, self.make_site, self.site_file]
        return [*self.lane_outputs(), *self.panel_outputs(), *files, self.message, self.fix, self.guide, self.state]


def build_page(host: ModelHost, examples: list[str], gallery: Gallery, session_ttl_s: float = SESSION_TTL_S) -> Page:
    """The first screen holds the prompt and the first lines of both lanes (checked in Chromium at 1280×720 and, for a
    run opened by a link, 1280×577), and beside them the examples and recorded runs, the legend and the inspector, which stay in view while the lanes scroll; the settings sit under the
    inspector, the step-through, figures and files below. Each section is built by its own function and returns its
    components by their names in `Page`."""
    state = gr.State(Session(), time_to_live=session_ttl_s, delete_callback=Session.close)
    with gr.Row(equal_height=False):
        with gr.Column(scale=3, elem_id="main"):
            gr.Markdown("## EASD Lab: SD vs entropy-aware SD", elem_id="masthead")
            ask = _ask()
            lanes = _lanes()
        with gr.Column(scale=2, elem_id="side"):
            picks = _picks(examples, gallery)
            side = _side(host)
    with gr.Row(equal_height=False):
        steps = _steps()
        plots = _figures()
    files = _files()
    return Page(
        state=state,
        **picks,
        **ask,
        **lanes,
        **side,
        **steps,
        **plots,
        **files,
        timer=gr.Timer(1.0),
        sessions=Sessions(),
        rooms=Rooms(),
        spans=Spans(),
        downloads=Path(get_upload_folder()) / "easd-sessions",
    )


def _picks(examples: list[str], gallery: Gallery) -> dict:
    """What to look at: an example to run, or a recorded run to open at once. At the top of the side column, so that
    the lanes start high on a laptop's first screen (8 lines of each at 1280×577, a run opened by a link included)."""
    with gr.Row(elem_id="picks"):
        example = gr.Dropdown(
            [(_first_words(e, 12), e) for e in examples], value=None, label="Examples (run at once)", elem_id="examples"
        )
        recorded = gr.Dropdown(gallery.choices(), value=None, label="Recorded runs (open at once)", elem_id="recorded")
    return dict(example=example, recorded=recorded)


def _ask() -> dict:
    """The prompt, Generate/Stop/Clear/Present, the message line and, under it, a refusal's remedy when there is one."""
    with gr.Row(equal_height=True):
        prompt = gr.Textbox(
            label="Prompt",
            lines=1,
            max_lines=3,  # a long prompt scrolls in its box: the lanes under it keep their place
            placeholder="Ask a math word problem or a coding question…",
            elem_id="prompt",
            scale=4,
        )
        with gr.Column(scale=1, min_width=240):
            generate = gr.Button("Generate", variant="primary", interactive=False, elem_id="generate")
            with gr.Row():
                stop = gr.Button("Stop", variant="stop", elem_id="stop", size="sm", min_width=50)
                clear = gr.Button("Clear", elem_id="clear", size="sm", min_width=50)
                present = gr.Button("Present", elem_id="present", size="sm", min_width=60)
    message = gr.HTML(elem_id="message")
    fix = gr.Button(visible=False, elem_id="fix", size="sm")
    return dict(prompt=prompt, generate=generate, stop=stop, clear=clear, present=present, message=message, fix=fix)


def _lanes() -> dict:
    """Two lanes side by side (each headed by its title and the method it runs, then its tokens and stats), and the
    comparison under them. SD | EASD to start with; EASD | MTI shows the two interventions on the same prompt and seed.
    The method picker sits on the title's line, its label read by screen readers only, so the tokens start high."""
    methods, titles, lanes, stats = {}, {}, {}, {}
    with gr.Row(equal_height=False):
        for lane in LANES:
            with gr.Column(min_width=260):
                with gr.Row(equal_height=True, elem_classes=["lane-head"]):
                    titles[lane] = gr.HTML(tag("h3", lane_title(lane, None)), elem_id=f"title_{lane}", min_width=120)
                    methods[lane] = gr.Dropdown(
                        [(method.title, name) for name, method in METHODS.items()],
                        value=DEFAULT_METHODS[lane],
                        label=f"{lane} lane runs",
                        show_label=False,
                        container=False,
                        min_width=110,
                        elem_id=f"method_{lane}",
                    )
                lanes[lane] = gr.HTML(lane_html(lane, None), js_on_load=LANE_JS, elem_id=f"lane_{lane}", elem_classes=["lane"])
                stats[lane] = gr.HTML(elem_id=f"stats_{lane}")
    with gr.Row(equal_height=True):
        search = gr.Textbox(
            label="Find tokens",
            placeholder='e.g. h_draft>1.5 h_target>1.5 origin=easd_penalty · fragile · "apples" — Enter: next match',
            max_lines=1,
            scale=4,
            elem_id="search",
        )
        search_prev = gr.Button("‹ previous match", size="sm", scale=0, min_width=130, elem_id="search_prev")
        search_next = gr.Button("next match ›", size="sm", scale=0, min_width=130, elem_id="search_next")
    found = gr.HTML(elem_id="found")
    searching = dict(search=search, search_prev=search_prev, search_next=search_next, found=found)
    return dict(methods=methods, titles=titles, lanes=lanes, stats=stats, comparison=gr.HTML(elem_id="comparison"), **searching)


def _side(host: ModelHost) -> dict:
    """What the page shows, folded; the legend and the inspector (in view beside the lanes as they scroll), the pair and
    its status, the settings."""
    # open on a first visit, as it defines a lane; a full render folds it (views.render_all), so that after a run the
    # legend and the inspector are on a laptop's first screen
    with gr.Accordion("What am I looking at?", open=True, elem_id="about") as guide:
        gr.Markdown(INTRO)
    legend = gr.HTML(legend_html(DEFAULT_METHODS.values()), elem_id="legend")
    inspector = gr.HTML(inspector_html("", None, None, RuleView()), js_on_load=INSPECTOR_JS, elem_id="inspector")
    names = list(host.allowed)
    pair = gr.Dropdown(
        names, value=host.default, label="Model pair (allowed by the operator)", elem_id="pair", interactive=len(names) > 1
    )
    status = gr.Markdown("Starting…", elem_id="status")
    controls = build_controls(host.max_new_tokens_cap)
    return dict(inspector=inspector, legend=legend, guide=guide, pair=pair, status=status, controls=controls)


def _steps() -> dict:
    """The step-through: a lane, previous and next, and the block shown."""
    with gr.Column():
        gr.Markdown("### Step through the blocks")
        with gr.Row():
            step_lane = gr.Radio(
                [("left lane", "left"), ("right lane", "right")], value="right", show_label=False, elem_id="step_lane"
            )
            step_prev = gr.Button("◀ previous block", elem_id="step_prev", size="sm")
            step_next = gr.Button("next block ▶", elem_id="step_next", size="sm")
        stepper = gr.HTML(stepper_html("", [], 0), elem_id="stepper")
    return dict(step_lane=step_lane, step_prev=step_prev, step_next=step_next, stepper=stepper)


def _figures() -> dict:
    """The figures, one tab each (figures.FIGURES)."""
    plots = {}
    with gr.Column(), gr.Tabs():
        for name, (title, _) in figures.FIGURES.items():
            with gr.Tab(title, elem_id=f"tab_{name}"):
                plots[name] = gr.Plot(figures.empty_figure(), show_label=False, elem_id=name)
    return dict(figures=plots)


def _files() -> dict:
    """Downloads of both runs, and loading a trace file."""
    with gr.Row():
        download_csv = gr.DownloadButton("Download trace (CSV)", interactive=False, elem_id="download_csv")
        download_json = gr.DownloadButton("Download trace (JSON)", interactive=False, elem_id="download_json")
        make_html = gr.Button("Make one HTML file (opens offline)", interactive=False, elem_id="make_html")
        make_site = gr.Button("Make a static site (.zip, to publish)", interactive=False, elem_id="make_site")
        upload = gr.UploadButton(
            "Load a trace file (.csv / .json)", file_types=[".csv", ".json"], type="filepath", elem_id="upload"
        )
    html_file = gr.File(label="Both lanes, the inspector and the figures in one file", visible=False, elem_id="html_file")
    site_file = gr.File(
        label="Both lanes as a static site: unzip and open index.html, or publish it", visible=False, elem_id="site_file"
    )
    return dict(
        download_csv=download_csv,
        download_json=download_json,
        make_html=make_html,
        html_file=html_file,
        make_site=make_site,
        site_file=site_file,
        upload=upload,
    )


def _first_words(text: str, count: int) -> str:
    words = text.split()
    return " ".join(words[:count]) + (" …" if len(words) > count else "")
