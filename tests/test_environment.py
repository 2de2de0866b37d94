"""environment.yml (Binder, conda) lists the same requirements as pyproject.toml; CI pins what it installs."""

import tomllib

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet


def _normal(requirement: str) -> tuple[str, str]:
    r = Requirement(requirement)
    return r.name.lower().replace("_", "-"), str(r.specifier)


def test_environment_matches_pyproject(root):
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    wanted = set(project["dependencies"])
    for extra in ("book", "test"):
        wanted |= set(project["optional-dependencies"][extra])
    env = yaml.safe_load((root / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    listed = [line for line in pip_section if not line.startswith("-")]
    assert sorted(map(_normal, listed)) == sorted(map(_normal, wanted))
    assert len(listed) == len(set(listed)), "a requirement is listed twice"


def test_constraints_pin_every_requirement_and_torch_cpu(root):
    pins = {}
    for line in (root / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.lower().replace("_", "-")] = version
    assert pins["torch"] == "2.13.0"
    assert pins["jupyter-book"].startswith("1.")
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"] + sum(
        project["optional-dependencies"].values(), []
    ):
        name, spec = _normal(requirement)
        assert name in pins, f"{name} is not pinned in constraints.txt"
        assert Requirement(requirement).specifier.contains(
            pins[name], prereleases=True
        ), (name, pins[name])


def test_python_versions_agree(root):
    """requires-python admits Colab's 3.12 and Binder's version, not 3.10 (the tests use tomllib, new in 3.11), and
    ruff checks the syntax of that oldest version."""
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    supported = SpecifierSet(pyproject["project"]["requires-python"])
    env = yaml.safe_load((root / "environment.yml").read_text())
    binder = next(
        d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python=")
    )
    assert "3.12" in supported and binder.removeprefix("python=") in supported
    assert "3.10" not in supported and "3.11" in supported
    assert pyproject["tool"]["ruff"]["target-version"] == "py311"


def test_version_is_set_once(root):
    import importlib.metadata

    import companion

    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    assert (
        "version" not in pyproject["project"]
        and "version" in pyproject["project"]["dynamic"]
    )
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "companion.__version__"
    }
    installed = importlib.metadata.version(pyproject["project"]["name"])
    assert installed == companion.__version__, (
        f"installed {installed}: reinstall (pip install -e .) after a version bump"
    )
