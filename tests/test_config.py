"""The YAML config: strict validation, environment overrides, and `config show`."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from hamimig.cli.app import app
from hamimig.config import load_config
from hamimig.errors import UsageError


def _show(config: Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        app, ["--config", str(config), "-o", "json", "config", "show"], env=env
    )
    return result.exit_code, result.stdout, result.stderr


def test_missing_file_means_defaults(tmp_path: Path) -> None:
    cfg = load_config(tmp_path / "absent.yaml", environ={})
    assert (cfg.adopt_existing, cfg.cdi_enabled, cfg.cdi_annotations) == (False, True, False)
    assert cfg.cdi_kind == "k8s.device-plugin.nvidia.com/dynamic-mig"
    assert cfg.profile_allowlist == ()
    assert cfg.profile_allowed("NVIDIA H100 80GB HBM3", "7g.80gb")


def test_full_file_and_sources(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "devices:\n"
        "  nvidia:\n"
        "    adoptExistingMIGInstances: true\n"
        "    migProfileAllowlist:\n"
        "      - 1g.10gb\n"
        "      - {models: [H100], profiles: [2g.20gb]}\n"
        "cdi:\n"
        "  enabled: false\n"
        "  kind: example.com/mig\n"
    )
    cfg = load_config(path, environ={})
    assert cfg.adopt_existing and not cfg.cdi_enabled and cfg.cdi_kind == "example.com/mig"
    assert cfg.profile_allowed("NVIDIA A100-SXM4-40GB", "1g.10gb")
    assert cfg.profile_allowed("NVIDIA H100 80GB HBM3", "2g.20gb")
    assert not cfg.profile_allowed("NVIDIA A100-SXM4-40GB", "2g.20gb")
    code, out, _ = _show(path, env={"HAMIMIG_CDI_ANNOTATIONS": "true"})
    assert code == 0
    import json

    settings = {s["key"]: s for s in json.loads(out)["settings"]}
    assert settings["devices.nvidia.adoptExistingMIGInstances"] == {
        "key": "devices.nvidia.adoptExistingMIGInstances",
        "value": True,
        "source": str(path),
    }
    assert settings["devices.nvidia.migProfileAllowlist"]["value"] == [
        "1g.10gb",
        {"models": ["H100"], "profiles": ["2g.20gb"]},
    ]
    assert settings["cdi.annotations"]["value"] is True
    assert settings["cdi.annotations"]["source"] == "env HAMIMIG_CDI_ANNOTATIONS"
    assert settings["cdi.kind"]["source"] == str(path)


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("devices: {nvidia: {adoptExistingMIGInstances: false}}\n")
    cfg = load_config(path, environ={"HAMIMIG_ADOPT_EXISTING_MIG_INSTANCES": "yes"})
    assert cfg.adopt_existing
    assert cfg.sources["devices.nvidia.adoptExistingMIGInstances"] == (
        "env HAMIMIG_ADOPT_EXISTING_MIG_INSTANCES"
    )


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("cdi:\n  annotation: true\n", "unknown key 'cdi.annotation'"),
        (
            "devices:\n  nvidia:\n    adoptExistingMigInstances: true\n",
            "unknown key 'devices.nvidia.adoptExistingMigInstances'",
        ),
        ("cdi:\n  enabled: 'yes'\n", "cdi.enabled must be true or false"),
        ("cdi:\n  kind: no-slash\n", "cdi.kind"),
        ("cdi:\n  kind: 'vendor/bad class'\n", "invalid class"),
        ("devices:\n  nvidia:\n    migProfileAllowlist: 1g.10gb\n", "must be a list"),
        (
            "devices:\n  nvidia:\n    migProfileAllowlist: [{models: [H100], profile: [x]}]\n",
            "unknown key 'profile'",
        ),
        ("- just\n- a list\n", "must be a mapping"),
        ("cdi: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_config_is_a_usage_error_naming_it(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(UsageError) as failed:
        load_config(path, environ={})
    assert needle in failed.value.message
    assert "\n" not in failed.value.message
    code, out, _ = _show(path)
    assert code == 2
    assert needle in out


def test_bad_environment_value(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="HAMIMIG_CDI_ENABLED"):
        load_config(tmp_path / "absent.yaml", environ={"HAMIMIG_CDI_ENABLED": "maybe"})


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ("{1: x, other: y, profiles: [1g.10gb]}", "unknown key 1 in devices.nvidia."),
        ("{other: y, 2.5: x, profiles: [1g.10gb]}", "unknown key 2.5 in devices.nvidia."),
        ("{10: x, 9: y}", "unknown key 9 in devices.nvidia."),
        ("{zeta: x, alpha: y}", "unknown key 'alpha' in devices.nvidia."),
    ],
)
def test_unknown_allowlist_keys_of_mixed_types_are_one_line(
    tmp_path: Path, entry: str, needle: str
) -> None:
    """YAML keys may be numbers beside strings: naming the first unknown one used to sort them
    together (an internal error, TypeError) instead of a usage error naming one of them."""
    path = tmp_path / "config.yaml"
    path.write_text(f"devices:\n  nvidia:\n    migProfileAllowlist: [{entry}]\n")
    code, out, _ = _show(path)
    assert code == 2, out
    assert needle in out and "internal" not in out
