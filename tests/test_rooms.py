"""Rooms (components.rooms): viewers follow the presenter's ticket through passive streams, and touch nothing of it."""

from dataclasses import replace

import pytest

from components.rooms import CODE_LENGTH, CODE_LETTERS, MAX_VIEWERS, Rooms
from components.session import Session
from easd.errors import EasdError
from easd.method.compare import DEFAULT_METHODS
from easd.method.generation import Generation
from easd.method.settings import DecodeSettings
from easd.serving.worker import Worker

LONG = DecodeSettings(max_new_tokens=300, temperature=0.8)


def comparison(pair, prompt: str = "A lecture on pears.") -> list[Generation]:
    return [Generation(pair, prompt, replace(LONG, method=method)) for method in DEFAULT_METHODS.values()]


def test_a_viewer_leaving_never_stops_the_presenters_run(hf_tiny_pair):
    worker = Worker(hf_tiny_pair, max_rows=4, row_tokens=400)
    presenter = worker.submit(comparison(hf_tiny_pair), owner="presenter")
    viewers = [presenter.ticket.open_stream(owner=f"viewer {i}", how="watched", passive=True) for i in range(3)]
    viewers[0].cancel()
    assert viewers[0].done and not presenter.done and not presenter.cancelled
    assert worker.holding(owner="viewer 1") == 0  # watching is not asking: no viewer's limit is touched
    presenter.cancel()  # the presenter stops: the run stops for everyone still watching
    assert presenter.join() and viewers[1].join()
    assert {t.stats.stop_reason for t in viewers[1].traces()} == {"stopped"}
    assert [t.token_ids for t in viewers[2].traces()] == [t.token_ids for t in presenter.traces()]


def test_a_viewer_alone_keeps_nothing_going(hf_tiny_pair):
    worker = Worker(hf_tiny_pair, max_rows=4, row_tokens=400, abandon_after_s=0.5)
    presenter = worker.submit(comparison(hf_tiny_pair, "Nobody reads this."), owner="p", reader=lambda: False)
    viewer = presenter.ticket.open_stream(owner="v", reader=lambda: True, how="watched", passive=True)
    assert presenter.join(30)  # a reading viewer does not hold an abandoned run in the batch
    assert {t.stats.stop_reason for t in viewer.traces()} == {"unread"}


def test_codes_are_short_readable_and_rooms_end_with_their_presenter():
    rooms, session = Rooms(), Session()
    room = session.room = rooms.open("presenter")
    assert len(room.code) == CODE_LENGTH and set(room.code) <= set(CODE_LETTERS)
    assert rooms.open("presenter") is room and rooms.open("another").code != room.code
    assert rooms.get(room.code.lower() + " ") is room and rooms.get(None) is None and rooms.get("<script>") is None
    session.clear()  # Clear keeps the room
    assert rooms.get(room.code) is room
    session.close()  # the tab closed, or the session's time ran out
    assert rooms.get(room.code) is None and rooms.open("presenter") is not room


def test_a_full_room_says_so_in_one_line():
    room = Rooms().open("presenter")
    for _ in range(MAX_VIEWERS):
        room.enter()
    with pytest.raises(EasdError, match=f"room {room.code} is full"):
        room.enter()
    room.leave()
    room.enter()


def test_viewers_showing_the_same_share_one_render():
    room, renders = Rooms().open("presenter"), []

    def render(version):
        renders.append(version)
        return {"lanes": f"version {version}"}

    for _ in range(30):  # thirty viewers at version 1
        assert room.shared((1, 1, "lanes"), lambda: render(1)) == {"lanes": "version 1"}
    assert room.shared((1, 2, "lanes"), lambda: render(2)) == {"lanes": "version 2"}
    assert renders == [1, 2]
    for version in range(3, 40):  # a long run: the room keeps only its latest renders
        room.shared((1, version, "lanes"), lambda v=version: render(v))
    room.shared((1, 3, "lanes"), lambda: render(3))
    assert renders.count(3) == 2  # long gone, so rendered again
