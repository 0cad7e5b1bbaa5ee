"""The command line tells: the usage line names every command, `--help` answers without
importing torch, `grid-train keys` lists the schema that docs/config.md shows, and the
messages count in the singular and plural."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grid._checks import plural as grid_plural
from grid._checks import same_length
from grid.voxel_grid import VoxelGrid
from train.__main__ import COMMANDS, main
from train.config import reference_table
from train.config_keys import all_keys, first_sentence
from train.dependencies import require
from train.errors import MissingDependencyError, plural

ROOT = Path(__file__).resolve().parents[2]


def test_usage_line_names_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    usage = capsys.readouterr().out.split("\n\n")[0]
    assert "[--config CONFIG]" in usage
    assert f"{{{','.join(COMMANDS)}}} ..." in usage
    assert {"view", "render", "keys"} <= set(COMMANDS)


# (arguments, the option its error names); None: `--help`
_NO_TORCH = [(["--help"], None), (["--no-such-option"], "--no-such-option")]
_NO_TORCH += [([name, "--help"], None) for name in COMMANDS]
_NO_TORCH += [
    (["view", "RUN", "--no-such-option"], "--no-such-option"),
    (["view", "RUN", "--port", "-1"], "--port"),
    (["render", "RUN", "--no-such-option"], "--path"),  # required
    (["render", "RUN", "--path", "orbit", "--frames", "DIR", "--seconds", "-1"], "--seconds"),
    (["keys", "--no-such-option"], "--no-such-option"),
]


@pytest.mark.parametrize(("argv", "option"), _NO_TORCH, ids=[" ".join(a) for a, _ in _NO_TORCH])
def test_help_and_argument_errors_do_not_import_torch(argv, option):
    """What makes `grid-train --help` take 0.05 s rather than 1.2 s on 2 cores, and
    `grid-train render --help` 0.05 s rather than 7 s under load: every command's help and
    its answer to a bad option come before torch is imported."""
    code = (
        "import sys\n"
        "from train.__main__ import main\n"
        "try:\n"
        f"    code = main({argv!r})\n"
        "except SystemExit as exit:\n"
        "    code = exit.code\n"
        "heavy = ('torch', 'numpy', 'matplotlib', 'grid')\n"
        "print(code, sorted(m for m in heavy if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    if option is None:
        assert "usage:" in done.stdout
        assert done.stdout.strip().splitlines()[-1] == "0 []"
    else:  # argparse's error or a ConfigError, naming the option: exit code 2
        assert done.stdout.strip().splitlines()[-1] == "2 []"
        assert option in done.stderr.strip().splitlines()[-1]


def _modules_after(code: str) -> list[str]:
    """Run `code` in a fresh interpreter (SystemExit caught); the last line it prints:
    its exit code and which of torch and grid it imported."""
    wrapped = (
        "import runpy, sys\n"
        "try:\n"
        f"    code = {code}\n"
        "except SystemExit as exit:\n"
        "    code = exit.code\n"
        "print(code, sorted(m for m in ('torch', 'grid') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", wrapped], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return done.stdout.strip().splitlines()


def test_keys_lists_the_keys_without_importing_torch():
    """`grid-train keys PREFIX` reads the schema alone: 0.2 s, not 1.2 s on 2 cores."""
    lines = _modules_after("__import__('train.__main__').__main__.main(['keys', 'train.lr'])")
    assert lines[0].startswith("train.lr  float = ")
    assert lines[-1] == "0 []"


# the commands run as modules besides grid-train's
_MODULE_COMMANDS = [
    "train.export",
    "train.nerf.scenes.generate",
    "train.nerf.capture.poses",
    "train.nerf.capture.bounds",
    "train.nerf.data.to_ngp",
]


@pytest.mark.parametrize("module", _MODULE_COMMANDS)
def test_module_commands_answer_help_without_importing_torch(module):
    """`python -m MODULE --help` answers before torch is imported (0.1-0.2 s on 2 cores
    rather than 1.5-2.5 s)."""
    lines = _modules_after(
        f"sys.argv.__setitem__(slice(1, None), ['--help']) or "
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    )
    assert any(line.startswith("usage: python -m ") for line in lines)
    assert lines[-1] == "0 []"


def test_import_grid_after_torch_imports_grid_alone():
    """`import grid` costs 0.03 s after torch (0.1 s on 2 busy cores; issue 62 allows 0.5 s):
    it loads its own modules and the native ops, no other package (numpy, scipy, sympy,
    torch._dynamo: each 0.2-1 s)."""
    code = (
        "import sys, torch\n"
        "before = set(sys.modules)\n"
        "import grid, grid._backend\n"
        "print(grid._backend.source)\n"
        "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] != 'grid'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    source, modules = done.stdout.strip().splitlines()
    if source == "jit":  # a checkout without the built extension compiles it at import
        pytest.skip(
            "the JIT build imports torch.utils.cpp_extension; users import an installed one"
        )
    assert (source, modules) == ("installed", "[]")


def test_keys_are_the_rows_of_the_docs_table():
    table = reference_table().splitlines()[2:]
    keys = all_keys()
    assert [row.split("`")[1] for row in table] == [k.key for k in keys]
    for row, key in zip(table, keys, strict=True):
        assert row == f"| `{key.key}` | {key.type} | `{key.default}` | {key.doc} |"
    page = (ROOT / "docs" / "config.md").read_text()
    assert all(row in page for row in table)


def test_keys_prints_type_default_and_help(capsys):
    assert main(["keys", "train."]) == 0
    out = capsys.readouterr().out
    names = [line.split()[0] for line in out.splitlines() if not line.startswith(" ")]
    assert names == [k.key for k in all_keys() if k.key.startswith("train.")]
    assert "train.steps  int = 800\n    Optimisation steps.\n" in out
    assert "train.upsample_steps  list[int] = []\n" in out
    assert main(["keys", "sdf.relax"]) == 0
    whole = capsys.readouterr().out
    assert whole.startswith("sdf.relax  int = 3\n")
    assert "0: marching cubes' mesh as it is." in " ".join(whole.split())


def test_keys_shows_the_rest_of_a_long_help_on_request(capsys):
    assert main(["keys", "sdf."]) == 0
    short = capsys.readouterr().out
    assert "(more: keys sdf.relax)" in " ".join(short.split())
    assert "as it is." not in " ".join(short.split())
    assert main(["keys", "train.lr"]) == 0  # train.lr and train.lr_final; train.lr in full
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[::2]] == [
        "train.lr",
        "train.lr_final",
    ]


def test_keys_with_an_unknown_prefix_names_the_tables(capsys):
    assert main(["keys", "trian."]) == 2
    err = capsys.readouterr().err
    assert "PREFIX: no key starts with 'trian.'" in err
    assert "train" in err and "experiment, seed, device" in err


@pytest.mark.parametrize(
    ("text", "first"),
    [
        ("Optimisation steps.", "Optimisation steps."),
        ("Adam betas. More here.", "Adam betas."),
        ("A mesh (e.g. Debian's libcgal-demo). Its hash.", "A mesh (e.g. Debian's libcgal-demo)."),
        ("Rounds (at 256^3. Chamfer -12%). Then.", "Rounds (at 256^3. Chamfer -12%)."),
        (
            "field, sdf: between voxels. nerf: linear only.",
            "field, sdf: between voxels. nerf: linear only.",
        ),
        ("`auto` (on). `on` too.", "`auto` (on)."),
        ("Rounds (-12%). 0: none.", "Rounds (-12%)."),
    ],
)
def test_first_sentence(text, first):
    assert first_sentence(text) == first


def test_plural():
    assert [plural(n, "point") for n in (0, 1, 2)] == ["0 points", "1 point", "2 points"]
    assert [grid_plural(n, "row") for n in (0, 1, 2)] == ["0 rows", "1 row", "2 rows"]


def test_a_count_of_one_is_singular_in_grid_messages():
    one, three = torch.zeros(1, 3), torch.zeros(3, 3)
    with pytest.raises(ValueError, match=r"^x: expected 1 row like y, got shape \[3, 3\]$"):
        same_length("x", three, "y", one)
    saved = {"features": torch.zeros(4, 4, 4, 1), "bounds": VoxelGrid(4, 2).bounds}
    with pytest.raises(RuntimeError, match="the saved grid has 1 feature per voxel, this"):
        VoxelGrid(4, 2).load_state_dict(saved)


def test_missing_package_message_agrees_with_its_subject():
    with pytest.raises(MissingDependencyError, match=r"--view: the viewer needs no_such_module_x"):
        require("no_such_module_x", key="--view", needs="the viewer", install="pip", singular=True)
    with pytest.raises(MissingDependencyError, match=r"pictures need no_such_module_x, which"):
        require("no_such_module_x", key="output.pictures", needs="pictures", install="pip")


def test_a_gpu_config_on_a_machine_without_cuda_says_so(monkeypatch, tmp_path, capsys):
    """`configs/*_gpu.toml` with device "auto" where CUDA is absent: one note before the run
    (its scene and steps take hours on a CPU); none on a GPU, for other configs, or for an
    explicit device."""
    from train import loop
    from train.devices import gpu_config_note

    gpu = ROOT / "configs" / "nerf_quality_gpu.toml"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "is sized for a GPU and this machine has none" in gpu_config_note(gpu, "auto")
    assert gpu_config_note(gpu, "cpu") is None  # asked for in so many words
    assert gpu_config_note(ROOT / "configs" / "nerf_realistic.toml", "auto") is None
    assert gpu_config_note(None, "auto") is None

    def stop(*args, **kwargs):
        raise loop.ConfigError("stopped before the run")

    monkeypatch.setattr(loop, "run", stop)
    assert main(["--config", str(gpu), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"grid-train: note: {gpu} is sized for a GPU" in err and "stopped before" in err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert gpu_config_note(gpu, "auto") is None
