"""GET /metrics (app.py --metrics on): read back with prometheus_client's own parser, and counted against the runs."""

from collections import Counter

import httpx
import pytest
from conftest import launch_app
from gradio_client import Client
from prometheus_client.parser import text_string_to_metric_families

from easd.pairs.tiny import load_tiny_pair
from easd.serving.host import ModelHost
from easd.serving.metrics import ServingMetrics

PROMPTS = ["a secret prompt about plums", "another secret prompt about pears"]


@pytest.fixture(scope="module")
def metered():
    """An app that counts, on the tiny pair: (url, host)."""
    host = ModelHost({"tiny-random": load_tiny_pair}, "tiny-random", max_new_tokens_cap=64, metrics=ServingMetrics())
    url, demo = launch_app(host)
    yield url, host
    demo.close()


def scrape(url: str, query: str = "") -> dict[tuple[str, tuple], float]:
    """Every sample of GET /metrics, parsed by prometheus_client: {(name, sorted labels): value}."""
    response = httpx.get(f"{url}metrics{query}", timeout=30)
    assert response.status_code == 200, response.text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted({"pair": "tiny-random", **labels}.items()))), 0.0)


def test_the_counts_are_the_runs_made_and_no_prompt_or_text_leaks(metered):
    url, host = metered
    client = Client(url, verbose=False)
    results = [client.predict(prompt=p, max_new_tokens=24, k=3, api_name="/compare") for p in [*PROMPTS, PROMPTS[0]]]
    samples = scrape(url)
    assert value(samples, "easd:requests_total", served="computed") == 2
    assert value(samples, "easd:requests_total", served="joined") + value(samples, "easd:requests_total", served="replayed") == 1
    computed = [run for result in results[:2] for run in result["runs"]]  # the third was the first again, not decoded
    for method in ("sd", "easd"):
        runs = [run for run in computed if run["settings"]["method"] == method]
        summaries = [run["summary"] for run in runs]
        assert value(samples, "easd:generation_tokens_total", method=method) == sum(len(run["rows"]) for run in runs)
        for figure, summary_key in (
            ("easd:spec_decode_num_drafts_total", "num_drafts"),
            ("easd:spec_decode_num_draft_tokens_total", "num_draft_tokens"),
            ("easd:spec_decode_num_accepted_tokens_total", "num_accepted_tokens"),
            ("easd:interventions_total", "interventions"),
        ):
            assert value(samples, figure, method=method) == sum(s[summary_key] for s in summaries), figure
        per_position = Counter()
        for run in runs:  # accepted drafts by their position in the block, counted from the rows
            first = {}
            for row in run["rows"]:
                first.setdefault(row["block"], row["position"])
                if row["origin"] == "draft_accepted":
                    per_position[row["position"] - first[row["block"]] + 1] += 1
        for position, count in per_position.items():
            name = "easd:spec_decode_num_accepted_tokens_per_pos_total"
            assert value(samples, name, method=method, position=str(position)) == count
    stops = sum(v for (name, _), v in samples.items() if name == "easd:run_stops_total")
    assert stops == 4  # two requests decoded, two runs each
    assert value(samples, "easd:decode_seconds_total") > 0
    assert value(samples, "easd:num_requests_waiting") == 0
    text = httpx.get(f"{url}metrics", timeout=30).text
    assert not any(word in text for word in ("secret", "plums", "pears")) and "easd:spec_decode_num_drafts_total" in text


def test_a_filter_keeps_those_metrics_and_anything_else_is_one_line(metered):
    url, _ = metered
    kept = scrape(url, "?name[]=easd:num_requests_waiting")
    assert {name for name, _ in kept} == {"easd:num_requests_waiting"}
    refused = httpx.get(f"{url}metrics?format=json", timeout=30)
    assert refused.status_code == 400 and refused.text == "/metrics takes only name[]=METRIC (got 'format')\n"
    posted = httpx.post(f"{url}metrics", timeout=30)
    assert posted.status_code == 405 and posted.text.count("\n") == 1


def test_without_the_flag_there_is_no_metrics_page(hf_tiny_pair):
    host = ModelHost({"tiny-random": lambda: hf_tiny_pair}, "tiny-random")
    url, demo = launch_app(host)
    try:
        assert httpx.get(f"{url}metrics", timeout=30).status_code == 404
    finally:
        demo.close()
