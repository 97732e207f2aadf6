"""A daemon started with --spill-dir, used from Python: NumPy arrays four times the arena come
back equal, the listing and contains say which are on disk, and a damaged spill file raises
ferry.SpillDamaged (an OSError) while the daemon serves on."""

import os

import numpy as np
import pytest

import ferry

MiB = 1 << 20


def test_arrays_beyond_the_arena_come_back_equal(start_daemon, workdir):
    spill = os.path.join(workdir, "spill")
    d = start_daemon("s", "16M", "--spill-dir", spill)
    with ferry.Client(d.socket) as c:
        arrays = [np.arange(i, i + MiB // 8, dtype=np.float64) for i in range(64)]
        for i, a in enumerate(arrays):
            c.put_object(a, id=f"arr{i}")
        states = {o["name"] or str(o["id"]): o["state"] for o in c.list()}
        assert "spilled" in states.values()
        on_disk = [o for o in c.list() if o["state"] == "spilled"]
        assert on_disk and on_disk[0]["id"] in c
        for i, a in enumerate(arrays):
            assert np.array_equal(c.get_object(f"arr{i}"), a)
        stats = c.stats()
        assert stats["evicted_objects"] == 0 and stats["restores"] > 0
        assert stats["spill_writes"] >= 40


def test_a_damaged_spill_file_raises_spill_damaged(start_daemon, workdir):
    spill = os.path.join(workdir, "spill")
    d = start_daemon("s", "16M", "--spill-dir", spill, "--persist-on-exit")
    with ferry.Client(d.socket) as c:
        c.put("victim", bytes(range(256)) * (4 * MiB // 256))
    d.stop()
    seg = os.path.join(spill, sorted(f for f in os.listdir(spill) if f.endswith(".seg"))[0])
    with open(seg, "r+b") as f:
        f.seek(4096 + 100)
        f.write(b"\xff" * 8)
    d.start()
    with ferry.Client(d.socket) as c:
        with pytest.raises(ferry.SpillDamaged) as e:
            c.get("victim")
        assert isinstance(e.value, OSError)
        assert "victim" not in c
        assert c.stats()["restore_failures"] == 1
