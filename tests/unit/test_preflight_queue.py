"""The planning thread's queue (issue #43): bounded in jobs and bytes, one job per distinct prompt, urgent
work first, and a refused prompt's work taken out. Work is counted, never timed."""

from __future__ import annotations

import threading
from typing import Any

from comfyui_headroom.nodes.host.preflight_queue import PreflightQueue

WAIT_S = 30  # a deadline, never a measured delay


def held_queue(**caps: int) -> tuple[PreflightQueue, threading.Event, list[str]]:
    """A queue whose worker is held inside a first job until the event is set; ``ran`` logs job names."""
    queue, release, started, ran = PreflightQueue(**caps), threading.Event(), threading.Event(), []

    def first() -> None:
        started.set()
        release.wait(WAIT_S)
        ran.append("first")

    queue.submit(first)
    assert started.wait(WAIT_S)
    return queue, release, ran


def test_a_full_queue_refuses_new_work_and_the_same_prompt_waits_once() -> None:
    queue, release, ran = held_queue(max_waiting=4, max_bytes=10_000)
    prompts = [{"n": i} for i in range(300)]
    answers = [
        queue.submit_preflight(f"k{i}", p, 10, f"id{i}", ran.append, f"p{i}") for i, p in enumerate(prompts)
    ]
    same = [queue.submit_preflight("k0", prompts[0], 10, "again", ran.append, "again") for _ in range(50)]
    assert answers[:4] == ["queued"] * 4 and set(answers[4:]) == {"full"}
    assert set(same) == {"same"} and queue.state()["waiting"] == 4
    release.set()
    assert queue.submit(lambda: None).result(WAIT_S) is None
    assert ran == ["first", "p0", "p1", "p2", "p3"]  # 5 jobs run for 350 posts
    assert queue.state()["full"] == 296 and queue.state()["same"] == 50


def test_the_byte_cap_refuses_a_prompt_that_would_pass_it() -> None:
    queue, release, _ = held_queue(max_waiting=100, max_bytes=1000)
    assert queue.submit_preflight("a", {}, 600, None, print) == "queued"
    assert queue.submit_preflight("b", {}, 600, None, print) == "full"
    assert queue.submit_preflight("c", {}, 400, None, print) == "queued"
    assert queue.state()["bytes"] == 1000
    release.set()


def test_urgent_work_goes_before_every_waiting_preflight() -> None:
    queue, release, ran = held_queue()
    for i in range(20):
        queue.submit_preflight(f"k{i}", {"n": i}, 1, None, ran.append, f"p{i}")
    fit = queue.submit_urgent(ran.append, "fit")
    assert fit is not None
    release.set()
    fit.result(WAIT_S)
    assert ran[:2] == ["first", "fit"]


def test_urgent_work_is_bounded_too() -> None:
    queue, release, _ = held_queue(max_urgent=2)
    futures = [queue.submit_urgent(lambda: None) for _ in range(5)]
    assert [f is not None for f in futures] == [True, True, False, False, False]
    release.set()


def test_a_refused_prompt_is_taken_out_and_its_running_plan_marked() -> None:
    queue, release, ran = held_queue()
    refused, kept = {"bad": 1}, {"good": 1}
    queue.submit_preflight("bad", refused, 1, "id-bad", ran.append, "bad")
    queue.submit_preflight("good", kept, 1, "id-good", ran.append, "good")
    assert queue.drop(refused) == ["id-bad"] and queue.state()["waiting"] == 1
    release.set()
    assert queue.submit(lambda: None).result(WAIT_S) is None
    assert ran == ["first", "good"]

    seen: list[Any] = []
    started, go = threading.Event(), threading.Event()

    def planning() -> None:
        started.set()
        go.wait(WAIT_S)
        seen.append(queue.cancelled())

    queue.submit_preflight("running", refused, 1, "id-run", planning)
    assert started.wait(WAIT_S)
    assert not queue.cancelled()  # asked from another thread: only the worker's job is marked
    assert queue.drop(refused) == ["id-run"]
    go.set()
    assert queue.submit(lambda: None).result(WAIT_S) is None
    assert seen == [True]


def test_close_cancels_what_waits_and_stops_the_worker_after_its_job() -> None:
    """The process's state made new (reset_process_state) closes the old monitor's queue: its worker
    finishes the job it runs, the waiting ones are cancelled, and no thread is left behind."""
    queue, release, ran = held_queue()
    waiting = queue.submit(lambda: ran.append("waiting"))
    worker = queue._thread
    queue.close()
    release.set()
    assert worker is not None
    worker.join(WAIT_S)
    assert not worker.is_alive() and waiting.cancelled() and ran == ["first"]
    assert queue.submit(lambda: "again").result(WAIT_S) == "again"  # a later job starts a worker again
