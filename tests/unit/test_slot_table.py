"""NFSv3's RPC slot table: the model's slots term, the rpc_slots mount knob, held only
while a mount is made and put back (by the run, or by `testbed clean` after a kill)."""

import math

import pytest

from testbed import model
from testbed.errors import ServiceError, SpecError
from testbed.model.sim import Reading
from testbed.network import cleanup, state
from testbed.services import slot_table
from testbed.spec import MountSpec

RTT = 0.0294  # 3,000 km


def _path(**kw):
    return model.Path(rtt_s=RTT, share_Bps=125e6, buffer_bytes=64 << 20, **kw)


def test_slots_bound_is_connections_x_slots_x_rsize_per_round_trip():
    assert model.slots_Bps(_path(rpc_slots=4), 65536) == pytest.approx(4 * 65536 / RTT)
    assert model.slots_Bps(_path(rpc_slots=4, connections=2), 65536) \
        == pytest.approx(8 * 65536 / RTT)
    assert model.slots_Bps(_path(rpc_slots=4, transport="rdma"), 65536) == math.inf
    assert model.slots_Bps(_path(), 1 << 20) > 1e12  # the kernel's 65,536 never binds


def test_few_slots_bind_a_deep_read_ahead_at_3000_km():
    """4 slots of 64 KiB per 29.4 ms (8.9 MB/s) under 16 MiB of read-ahead on 1 Gbit/s:
    the point tests/system/test_model.py measures."""
    reading = Reading(1, 4 << 20, 1 << 20, 65536, 16 << 20)
    b = model.predict(_path(rpc_slots=4), reading, demand_Bps=400e6)
    assert b.limited_by == "slots" and b.predicted == pytest.approx(8.92e6, rel=0.01)
    assert "slots" in model.LABELS


def test_rpc_slots_is_an_nfsv3_tcp_knob_and_not_a_mount_option():
    """NFSv4.1+ transports are made with unlimited slots (the setting would do nothing:
    refused, not accepted silently); RDMA has its own credits."""
    m = MountSpec(rpc_slots=16, vers="3")
    assert "slot" not in m.options()
    for other in (dict(vers="4.2"), dict(vers="4.1"), dict(vers="3", transport="rdma")):
        with pytest.raises(SpecError, match="rpc_slots = 16: the RPC slot table binds NFSv3"):
            MountSpec(rpc_slots=16, **other)
    with pytest.raises(SpecError):
        MountSpec(rpc_slots=1, vers="3")  # sunrpc's minimum is 2


def _registry(tmp_path, monkeypatch):
    monkeypatch.setattr(state, "STATE_DIR", tmp_path / "runs")
    table = tmp_path / "tcp_max_slot_table_entries"
    table.write_text("65536\n")
    return state.RunState("tb0f0f", owner_pid=2**22 + 7, owner_start=1), table


def test_held_while_the_mount_is_made_then_put_back(tmp_path, monkeypatch):
    run, table = _registry(tmp_path, monkeypatch)
    with slot_table.held(run, 4, table):
        assert table.read_text() == "4"
        assert state.load_all()[0].sysctls == {str(table): ["65536", "4"]}
    assert table.read_text() == "65536" and not state.load_all()[0].sysctls
    with slot_table.held(run, None, table):  # unset: the kernel's own, untouched
        assert table.read_text() == "65536"


def test_a_value_written_meanwhile_is_left(tmp_path, monkeypatch):
    run, table = _registry(tmp_path, monkeypatch)
    with slot_table.held(run, 4, table):
        table.write_text("128")
    assert table.read_text() == "128"


def test_clean_puts_back_what_a_killed_mount_held(tmp_path, monkeypatch):
    run, table = _registry(tmp_path, monkeypatch)
    held = slot_table.held(run, 4, table)
    held.__enter__()  # then SIGKILL: the body never ends
    (dead,) = state.load_all()
    report = cleanup.CleanReport()
    cleanup.clean_run(dead, report, cleanup._Budget(5.0), [cleanup.restore_sysctls])
    assert table.read_text() == "65536"
    assert report.restored == [f"tb0f0f: {table} put back to 65536"]
    table.write_text("4")
    dead.sysctls = {str(table): ["65536", "8"]}  # someone wrote another value since
    report = cleanup.CleanReport()
    cleanup.restore_sysctls(dead, report, cleanup._Budget(5.0))
    assert table.read_text() == "4" and "changed since" in report.restored[0]


def test_a_kernel_without_the_table_is_one_line(tmp_path, monkeypatch):
    run, _ = _registry(tmp_path, monkeypatch)
    monkeypatch.setattr(slot_table.launch, "run", lambda *a, **k: None)
    with pytest.raises(ServiceError, match="rpc_slots = 4: this kernel has no"):
        with slot_table.held(run, 4, tmp_path / "absent"):
            pass
