"""Pinning nutpie's chain threads to cores, on against off, where users run many fits.

The flag ``jax_ofg__pin_sampler_threads``, set per process through
``PYTENSOR_FLAGS`` (with a ``base_compiledir`` that a first, untimed run
fills); on and off alternate in every round, the first of the two swapping
from round to round (``--rounds``). Studies (``--studies``):

* ``processes``: N processes started together, each one fit as the Dask
  how-to runs them, ``pm.sample(cores=1, chains=2)``, of the predator-prey
  model of ``examples/stan_ode.py`` with the example's other arguments (its
  start, Stan's rule for the mass matrix); N = the usable cores, then twice
  that. Per round: each process's wall (start to exit) and their median. While
  they sample, every chain thread's home core (:mod:`_chains`): whether a
  core held two sampling chains while a usable core held none.
* ``sbc``: ``examples/sbc_boarding_school.py`` on its ``LocalCluster`` (one
  single-threaded worker per core, each fit ``pm.sample(cores=1)``; the
  workers inherit ``PYTENSOR_FLAGS``), a small configuration: the whole run's
  wall, and its fits' (the example's report).

Run (with the machine to itself)::

    .venv/bin/python benchmarks/pinning.py              # ~30 minutes on 2 cores
    .venv/bin/python benchmarks/pinning.py --quick      # a smoke run, ~4 minutes

Writes ``benchmarks/results/pinning.json`` and ``.md`` (``--quick``:
``pinning_quick.*``); ``--report`` renders the stored runs again.
"""

from __future__ import annotations

import time


START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from pathlib import Path  # noqa: E402

import _report  # noqa: E402
import _room  # noqa: E402
from _chains import ThreadWatch  # noqa: E402
from _processes import ChildFailed, run_python, start_python, wait_python  # noqa: E402
from _report import fill, format_ratio  # noqa: E402
from _timing import median  # noqa: E402


STUDIES = ("processes", "sbc")
#: The settings compared: the flag's value, and its label.
PINNING = {True: "on", False: "off"}


def usable_cores() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def flags(cache: Path, pin: bool) -> dict[str, str]:
    """The environment of a process with pinning ``pin`` and the run's caches."""
    flags = f"base_compiledir={cache},jax_ofg__pin_sampler_threads={pin}"
    return {"PYTENSOR_FLAGS": flags, "EQX_ON_ERROR": "nan"}  # as the examples


def child(spec: dict) -> dict:
    """One fit as the Dask how-to runs it, of the predator-prey model."""
    import pymc as pm
    import stan_ode

    model = stan_ode.build_model()
    before = time.perf_counter()
    with model:
        idata = pm.sample(
            draws=spec["length"],
            tune=spec["length"],
            chains=2,
            cores=1,
            random_seed=spec["seed"],
            progressbar=False,
            nuts_sampler="nutpie",
            nuts={"adaptation": "draw_diag"},
            initvals=stan_ode.PRIOR_LOCATIONS,
        )
    return {
        "pm.sample": time.perf_counter() - before,
        "sampling": float(idata.posterior.attrs["sampling_time"]),
        "whole": time.perf_counter() - START,
    }


def processes_at_once(n: int, pin: bool, cache: Path, settings) -> dict:
    """``n`` fits started together; each one's wall, and where their chains ran."""
    spec = json.dumps({"length": settings.length, "seed": settings.seed})
    command = [__file__, "--child", spec]
    started = [start_python(command, env=flags(cache, pin)) for _ in range(n)]
    pids = [s.process.pid for s in started]
    with ThreadWatch(pids) as watch, ThreadPoolExecutor(n) as pool:
        waits = [pool.submit(wait_python, s, timeout=settings.timeout) for s in started]
        try:
            done = [w.result() for w in waits]
        except ChildFailed as error:
            return {"error": str(error)}
    walls, fits = [d.seconds for d in done], [d.result for d in done]
    return {"walls": walls, "fits": fits} | watch.crowding(usable_cores())


def sbc(pin: bool, cache: Path, settings) -> dict:
    """The SBC example at ``settings.sbc`` (fits, warm-up and draws)."""
    fits, length = settings.sbc
    arguments = [_room.EXAMPLES / "sbc_boarding_school.py", "--fits", fits]
    arguments += ["--tune", length, "--draws", length, "--out", cache / "sbc.png"]
    try:
        done = run_python(
            arguments, env=flags(cache, pin), timeout=settings.timeout, result=False
        )
    except ChildFailed as error:
        return {"error": str(error)}
    found = re.search(r"(\d+) fits done, 0 failed, in ([\d.]+) s", done.output)
    if not found:
        return {"error": "a fit failed: " + done.output[-300:]}
    return {"wall": done.seconds, "fits done": int(found[1]), "fits": float(found[2])}


def rounds(study: str, settings, cache: Path) -> list[dict]:
    """The study's rounds, on and off alternating; a first run fills the caches."""
    usable = len(usable_cores())
    sizes = (usable, 2 * usable) if study == "processes" else (None,)
    cases = [(n, pin) for n in sizes for pin in PINNING]

    def run(n, pin) -> dict:
        if study == "sbc":
            return sbc(pin, cache, settings)
        return processes_at_once(n, pin, cache, settings)

    run(1, True)  # fills the caches, untimed
    found = []
    for round_ in range(settings.rounds):
        order = cases if round_ % 2 == 0 else [(n, not p) for n, p in cases]
        for n, pin in order:
            found.append({"round": round_, "n": n, "pin": pin, **run(n, pin)})
            print(f"{study}: {json.dumps(found[-1])[:400]}", flush=True)
    return found


# ------------------------------------------------------------------- report
def cells(runs: list[dict], value, pin: bool) -> list[str]:
    """A setting's median of ``value(run)`` over the rounds, each round's and, for
    pinning on, its ratio to off, per round and their median."""
    values = {p: [value(r) for r in runs if r["pin"] == p] for p in PINNING}
    ratios = [on / off for on, off in zip(values[True], values[False])]
    return [
        f"{median(values[pin]):.1f}",
        ", ".join(f"{v:.1f}" for v in values[pin]),
        ", ".join(map(format_ratio, ratios)) if pin else "",
        format_ratio(median(ratios)) if pin and ratios else "",
    ]


def processes_rows(runs: list[dict]) -> list[list]:
    rows = []
    for n in sorted({r["n"] for r in runs}):
        found = [r for r in runs if r["n"] == n]
        for pin, label in PINNING.items():
            mine = [r for r in found if r["pin"] == pin]
            homes = "; ".join(
                "/".join("".join(map(str, h)) for h in r["homes"].values())
                for r in mine
            )
            crowded = sum(r["crowded"] for r in mine), sum(r["reads"] for r in mine)
            rows.append([n, label, *cells(found, lambda r: median(r["walls"]), pin)])
            rows[-1] += ["{} of {}".format(*crowded), homes]
    return rows


def sbc_rows(runs: list[dict]) -> list[list]:
    return [
        [key, label, *cells(runs, lambda r, key=key: r[key], pin)]
        for key in ("wall", "fits")
        for pin, label in PINNING.items()
    ]


def report(data: dict) -> str:
    text, meta = _report.texts("pinning"), data["meta"]
    sections = [fill(text["intro"], **meta)]
    for study, rows_of in (("processes", processes_rows), ("sbc", sbc_rows)):
        runs = sorted(data.get(study, []), key=lambda r: r["round"])
        sections += [
            f"{study}, round {r['round']}, pinning {PINNING[r['pin']]} failed: "
            f"`{r['error'][-300:]}`"
            for r in runs
            if "error" in r
        ]
        if runs := [r for r in runs if "error" not in r]:
            sections.append(fill(text[study], rows_of(runs), **meta))
    return "\n\n".join(sections) + "\n"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--studies", default=",".join(STUDIES))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--report", action="store_true", help="only the tables")
    settings = parser.parse_args(argv)
    settings.studies = [s for s in settings.studies.split(",") if s]
    settings.length = 100 if settings.quick else 1000  # warm-up steps, and draws
    settings.sbc = (2, 50) if settings.quick else (8, 200)  # fits, warm-up, draws
    settings.rounds = 1 if settings.quick else settings.rounds
    settings.name = "pinning_quick" if settings.quick else "pinning"
    return settings


def main(argv=None) -> None:
    settings = parse_args(argv)
    if settings.child:
        print(json.dumps(child(json.loads(settings.child))), flush=True)
        return
    data = _report.load(settings.name, {})
    if not settings.report:
        command = " ".join(["python benchmarks/pinning.py", *sys.argv[1:]])
        versions = _report.package_versions(["pytensor", "pymc", "nutpie", "jax"])
        data["meta"] = _report.meta(command, versions) | {
            "cores": len(usable_cores()),
            "length": settings.length,
            "sbc_fits": settings.sbc[0],
            "sbc_length": settings.sbc[1],
        }
        for study in settings.studies:
            with tempfile.TemporaryDirectory(prefix=f"pinning-{study}-") as cache:
                data[study] = rounds(study, settings, Path(cache))
            _report.save(settings.name, data)
    _report.write(settings.name, report(data))


if __name__ == "__main__":
    main()
