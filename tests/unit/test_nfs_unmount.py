"""NfsMount.unmount's bookkeeping (no kernel): a mount that is gone counts as unmounted,
even when the umount that removed it was killed for overrunning its time."""

from types import SimpleNamespace

import pytest

from testbed.errors import ServiceError
from testbed.services import nfs


def _mount(tmp_path, monkeypatch, answers, mounted):
    """An NfsMount whose umount attempts answer `answers` in turn and whose mount point
    is listed in /proc/mounts while `mounted` says so (one value per look)."""
    dropped = []
    m = nfs.NfsMount.__new__(nfs.NfsMount)
    m.path, m.mounted, m.worker = tmp_path / "mnt-w1", True, "w1"
    m.net = SimpleNamespace(state=SimpleNamespace(drop_mount=dropped.append))
    tries = iter(answers)
    looks = iter(mounted)
    monkeypatch.setattr(nfs.NfsMount, "_umount", lambda self, flags: next(tries))
    monkeypatch.setattr(nfs.NfsMount, "shutdown", lambda self: True)
    monkeypatch.setattr(nfs, "_is_mounted", lambda path: next(looks))
    return m, dropped


def test_a_killed_umount_that_finished_anyway_is_a_clean_unmount(tmp_path, monkeypatch):
    """Seen at 3,000 km under time dilation: the plain umount overran 15 s and was
    killed, the kernel finished it, and -f / -l then said "not mounted": the point's
    measurement was thrown away for it until 2026-12-07."""
    m, dropped = _mount(tmp_path, monkeypatch, ["umount: no answer within 15 s"],
                        [True, False])
    m.unmount()
    assert not m.mounted and dropped == [str(m.path)]


def test_a_mount_that_stays_is_an_error(tmp_path, monkeypatch):
    m, _ = _mount(tmp_path, monkeypatch, ["busy", "busy", "still busy"], [True] * 4)
    with pytest.raises(ServiceError, match="cannot unmount .*still busy"):
        m.unmount()
    assert m.mounted


def test_a_refused_mount_reports_the_refusal_not_its_cleanup(tmp_path, monkeypatch):
    import subprocess
    m = nfs.NfsMount.__new__(nfs.NfsMount)
    m.path, m.mounted, m.worker, m.subdir = tmp_path / "mnt-w1", False, "w1", ""
    m.spec = nfs.MountSpec()
    m.server = SimpleNamespace(remote_path=lambda vers: "/", address="10.0.0.1",
                               wait_ready=lambda: None)
    m.net = SimpleNamespace(prefix="tb0f0f", procs=SimpleNamespace(cmd=lambda w, a: a),
                            state=SimpleNamespace(add_mount=lambda p: None),
                            callback=lambda f: None)
    monkeypatch.setattr(nfs.NfsMount, "_set_client_identifier", lambda self: None)
    monkeypatch.setattr(nfs, "_run", lambda argv, timeout, what: subprocess.CompletedProcess(
        argv, 32, "", "mount.nfs: access denied by server while mounting 10.0.0.1:/\n"))

    def unmount(self):
        raise ServiceError("cannot unmount: still busy")
    monkeypatch.setattr(nfs.NfsMount, "unmount", unmount)
    with pytest.raises(ServiceError, match="refused: mount.nfs: access denied"):
        m.mount()
