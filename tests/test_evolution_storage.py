"""The shared folder under contention: unique staging names, exclusive claims."""

import json
import multiprocessing

from derl.evolution.storage import Identity, RunDir

RACES = 1000


def _claimer(out, token, barrier, results):
    """Races for slots 0..RACES-1 as a process sharing host and pid with its rival (as in two pid
    namespaces); the barrier lines both up before every slot, so each slot is a real race."""
    run = RunDir(out, identity=Identity("samehost", 4242, token))
    won = []
    for slot in range(RACES):
        barrier.wait(timeout=60)  # a rival that crashed breaks the barrier instead of hanging
        if run.claim_slot(slot, {"slot": slot, "id": f"{slot:06d}", "attempt": 0, "node": 0, "worker": 0}):
            won.append(slot)
    results.put((token, won))


def test_claimers_with_the_same_host_and_pid_never_both_own_a_slot(tmp_path):
    out = tmp_path / "run"
    RunDir(out).create()
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(2), context.Queue()
    procs = [context.Process(target=_claimer, args=(str(out), token, barrier, results))
             for token in ("a" * 16, "b" * 16)]
    for proc in procs:
        proc.start()
    won = dict(results.get(timeout=120) for _ in procs)
    for proc in procs:
        proc.join(timeout=30)
        assert proc.exitcode == 0
    a, b = (set(slots) for slots in won.values())
    print("WON", len(a), len(b))
    assert not a & b and a | b == set(range(RACES))
    assert min(len(a), len(b)) > RACES // 10  # both won often: the races were real
    for token, slots in won.items():  # the claim on disk names the process that was told it won
        for slot in slots:
            claim = json.loads((out / "slots" / f"{slot:06d}.json").read_text())
            assert (claim["host"], claim["pid"], claim["token"]) == ("samehost", 4242, token)
    assert not list((out / "tmp").iterdir())  # every staged file was cleaned up


def test_staged_names_are_unique_per_process_and_call(tmp_path):
    one, two = RunDir(tmp_path, Identity("h", 1, "x")), RunDir(tmp_path, Identity("h", 1, "y"))
    target = tmp_path / "slots" / "000001.json"
    names = {one._staged(target), one._staged(target), two._staged(target)}
    assert len(names) == 3 and all("h-1-" in p.name for p in names)
