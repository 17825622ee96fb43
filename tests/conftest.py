"""What every test run says about itself: the kernel, Hypothesis' seed for this run (new
each run unless HYPOTHESIS_SEED or --hypothesis-seed gives one, printed in the header and
again after a failure, so that a failure replays), and the slowest hostile-input call
against README's CPU budget (tests/unit/cpu_budget.py)."""

import os
import platform
import random
import sys

import pytest

SEED_ENV = "HYPOTHESIS_SEED"
SEED_KEY = pytest.StashKey[int]()


def run_seed(config: pytest.Config) -> int:
    """This run's Hypothesis seed: --hypothesis-seed, HYPOTHESIS_SEED, or a fresh one."""
    given = config.getoption("hypothesis_seed", None) or os.environ.get(SEED_ENV) or None
    if given is not None:
        try:
            return int(given)
        except ValueError:
            raise pytest.UsageError(f"Hypothesis seed {given!r}: expected an integer") from None
    return random.SystemRandom().randrange(2**32)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Seed every Hypothesis test of the run with the run's seed (Hypothesis' own
    --hypothesis-seed, set here when not given, before its plugin reads it)."""
    config.stash[SEED_KEY] = seed = run_seed(config)
    if hasattr(config.option, "hypothesis_seed"):
        config.option.hypothesis_seed = str(seed)



def pytest_report_header(config):
    kind = os.environ.get("APN_LAB_KERNEL", "host")
    seed = config.stash[SEED_KEY]
    return [f"kernel: {platform.release()} ({kind}), uid {os.geteuid()}, {os.cpu_count()} CPU",
            f"hypothesis seed: {seed} (replay: {SEED_ENV}={seed} or --hypothesis-seed={seed})"]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The seed again when Hypothesis tests ran (so a -q run shows it too, and a failure's
    log holds how to replay it); the slowest hostile-input call if any ran."""
    budget = sys.modules.get("cpu_budget")
    if budget is not None and budget.SLOWEST:
        cpu_s, what = budget.SLOWEST[0]
        terminalreporter.write_line(
            f"hostile input: {budget.CALLS[0]} call(s), the slowest {cpu_s:.3f} s of CPU "
            f"(budget {budget.BUDGET_S:g} s): testbed {what[:120]}")
    ran = {key: [r for r in terminalreporter.stats.get(key, []) if "hypothesis" in
                 getattr(r, "keywords", {})] for key in ("passed", "failed")}
    if ran["passed"] or ran["failed"]:
        seed = config.stash[SEED_KEY]
        terminalreporter.write_line(
            f"hypothesis seed {'was ' if ran['failed'] else ''}{seed}: replay with "
            f"{SEED_ENV}={seed} or --hypothesis-seed={seed}")
