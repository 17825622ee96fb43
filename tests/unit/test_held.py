"""A teardown runs to its end through Ctrl-C (testbed/network/held.py)."""

import os
import signal

import pytest

from testbed.network.held import interrupts_held


def test_a_ctrl_c_during_teardown_waits_for_its_end(capsys):
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN in a job started in the background
    steps = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts_held("teardown of tbX"):
            steps.append("unmount")
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)  # twice: still one line
            steps.append("namespaces")
    assert steps == ["unmount", "namespaces"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "teardown of tbX in progress" in err
    assert signal.getsignal(signal.SIGINT) is before


def test_no_signal_no_interrupt():
    before = signal.getsignal(signal.SIGINT)
    with interrupts_held("teardown"):
        pass
    assert signal.getsignal(signal.SIGINT) is before
