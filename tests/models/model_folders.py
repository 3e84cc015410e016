"""A copy of a test model's folder with its config.json changed: how the tests make a variant
of a tiny model (another RoPE, no window, a legacy key) without building another one."""

import json
import shutil


def config_variant(folder, tmp_path, name, **changes):
    """``folder`` copied to ``tmp_path / name`` with ``changes`` applied to its config
    (a value None removes the key)."""
    out = tmp_path / name
    shutil.copytree(folder, out)
    config = json.loads((out / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (out / "config.json").write_text(json.dumps(config))
    return out
