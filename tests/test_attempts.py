"""Every attempt (session) of a resumable training job, recorded beside its checkpoints
(tdmpc2core.io.attempts): what the report's runtime table shows for a resumed job."""
from __future__ import annotations

import json

from tdmpc2core.io import attempts


def test_attempts_accumulate_across_sessions_and_a_finished_run_starts_anew(tmp_path):
    ck = tmp_path / "ck"
    a1 = attempts.begin(ck, "agent steps")
    assert json.loads((ck / attempts.FILE).read_text())["attempts"][0]["outcome"] == "running"
    a1.end("stopped by SIGTERM", end_step=3000)
    a2 = attempts.begin(ck, "agent steps")  # killed without a word: stays "running" on disk
    a3 = attempts.begin(ck, "agent steps")
    a3.end("completed", end_step=6000, start_step=3000)
    recs = a3.records()
    assert [r["attempt"] for r in recs] == [1, 2, 3]
    assert [r["outcome"] for r in recs] == ["stopped by SIGTERM", attempts.KILLED, "completed"]
    assert (recs[0]["end_step"], recs[2]["start_step"], recs[2]["end_step"]) == (3000, 3000, 6000)
    assert all(r["wall_seconds"] is not None for r in (recs[0], recs[2])) and recs[1]["wall_seconds"] is None
    assert attempts.read(ck) == recs and a2.path == a3.path
    refused = attempts.begin(ck, "agent steps")  # e.g. the folder holds another run's checkpoints
    refused.discard()
    assert attempts.read(ck) == recs
    # the run finished (its completion marker): a forced rerun is a new run with its own list
    (ck / attempts.FINISHED_MARKER).write_text("{}")
    a4 = attempts.begin(ck, "agent steps")
    assert [r["attempt"] for r in a4.records()] == [1]
    # no checkpoint folder: one record, in memory only
    mem = attempts.begin(None, "updates")
    mem.end("completed", end_step=10)
    assert mem.records()[0]["unit"] == "updates" and mem.path is None
