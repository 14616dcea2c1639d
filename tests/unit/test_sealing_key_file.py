"""The data dir's webhook key file is made once, whole: processes and threads that start together all read the
same complete key (one read between another's create and its write used to see an empty file, not a key)."""

from __future__ import annotations

import threading
from pathlib import Path

from cryptography.fernet import Fernet

from api.webhooks.sealing import KEY_FILE, Sealer, server_keys


def test_concurrent_first_uses_read_one_whole_key(tmp_path: Path) -> None:
    for round_ in range(20):
        data_dir = tmp_path / str(round_)
        start = threading.Barrier(8)
        keys: list[list[bytes]] = []

        def first_use(keys: list[list[bytes]] = keys, start: threading.Barrier = start, d: Path = data_dir) -> None:
            start.wait()
            keys.append(server_keys([], d))

        threads = [threading.Thread(target=first_use) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len({tuple(k) for k in keys}) == 1 and len(keys) == 8
        Fernet(keys[0][0])  # a whole key
        assert sorted(p.name for p in data_dir.iterdir()) == [KEY_FILE]  # no draft left behind


def test_a_sealer_on_the_key_file_opens_what_it_sealed(tmp_path: Path) -> None:
    sealer = Sealer(lambda: server_keys([], tmp_path))
    assert Sealer(lambda: server_keys([], tmp_path)).open(sealer.seal("whsec_x")) == "whsec_x"
