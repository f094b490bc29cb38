"""The pod list of docs/design.md (one complete Pod with `hami.io/vgpu-mig-allocations`) is
one hamimig reads and recovery acts on as that page says (adopt-active; a wrong GI ID is exit
5); the Pod alone is refused (exit 2)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.cli import Cli, ok, refused, sim_create

DESIGN = Path(__file__).resolve().parent.parent / "docs" / "design.md"


def readme_pod() -> str:
    text = DESIGN.read_text(encoding="utf-8")
    section = text[text.index("### The pod annotation") :]
    match = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert match is not None
    return match.group(1)


def test_the_readme_pod_is_read_and_adopted(cli: Cli, tmp_path: Path) -> None:
    inst = sim_create(cli, "2g.20gb", "2")
    pod = readme_pod()
    pod = re.sub(r"GPU-[0-9a-f-]{36}", inst["gpuUUID"], pod)
    pod = re.sub(r"MIG-[0-9a-f-]{36}", inst["migUUID"], pod)
    assert f'"gpuInstanceID":{inst["gpuInstanceID"]}' in pod  # the simulator's GI ID at 2:2
    path = tmp_path / "pods.yaml"
    path.write_text(pod)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(pod.replace('"gpuInstanceID":4', '"gpuInstanceID":5'))
    message = refused(
        cli.json("--node", "gpu-node-1", "recover", "--pods", str(wrong)), 5, "unverifiable"
    )
    assert "but the live layout differs: gpuInstanceID is 5 in the annotation, 4 live" in message
    report = ok(cli.json("--node", "gpu-node-1", "recover", "--pods", str(path)))
    assert [(a["action"], a["migUUID"]) for a in report["actions"]] == [
        ("adopt-active", inst["migUUID"])
    ]


def test_the_readme_pod_alone_is_not_a_pod_list(cli: Cli, tmp_path: Path) -> None:
    import yaml

    alone = tmp_path / "pod.yaml"
    alone.write_text(yaml.safe_dump(yaml.safe_load(readme_pod())["items"][0]))
    message = refused(cli.json("--node", "gpu-node-1", "recover", "--pods", str(alone)), 2, "usage")
    assert "is a single Pod, not the node's pod list" in message
