"""The command line's exit statuses: 0 ok, 1 NepcoreError (one line), 2 usage; bugs keep their traceback."""

from __future__ import annotations

import sys
import types

import pytest

from nepcore import cli
from nepcore.errors import NepcoreError, SettingError


@pytest.fixture
def fake_command(monkeypatch):
    """A command ``fake`` whose run raises what the test puts in ``raised[0]``."""
    raised: list[BaseException | None] = [None]
    module = types.ModuleType("nepcore.cli._fake")
    module.add_arguments = lambda parser: parser.add_argument("--n", type=cli.positive_int, default=1)

    def run(args):
        if raised[0] is not None:
            raise raised[0]
        return 0

    module.run = run
    monkeypatch.setitem(sys.modules, "nepcore.cli._fake", module)
    monkeypatch.setitem(cli.COMMANDS, "fake", ("_fake", "a command for the tests"))
    return raised


def test_success_and_user_errors(fake_command, capsys):
    assert cli.main(["fake"]) == 0
    fake_command[0] = NepcoreError("data.xyz: frame 3: forces: expected shape (4, 3)")
    assert cli.main(["fake"]) == 1
    assert capsys.readouterr().err == "error: data.xyz: frame 3: forces: expected shape (4, 3)\n"


@pytest.mark.parametrize(
    "argv, raised, message",
    [
        (["fake", "--n", "0"], None, "argument --n: must be >= 1, found 0"),
        (["fake", "--bogus"], None, "unrecognized arguments: --bogus"),
        (["fake"], SettingError("--split cannot be combined with --valid/--test"), "--split cannot be combined"),
    ],
)
def test_usage_errors_exit_2(fake_command, capsys, argv, raised, message):
    fake_command[0] = raised
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: nepcore fake") and message in err, err


@pytest.mark.parametrize("bug", [ValueError("a bug, not bad input"), KeyError("x"), RuntimeError("boom")])
def test_other_exceptions_keep_their_traceback(fake_command, bug):
    fake_command[0] = bug
    with pytest.raises(type(bug)):
        cli.main(["fake"])


def test_every_user_facing_error_class_is_a_nepcore_error():
    from nepcore.data.checks import StructureError
    from nepcore.data.neighbor_frames import FramesError
    from nepcore.data.structures_h5 import DatasetFileError
    from nepcore.evaluation.export import ExportError
    from nepcore.evaluation.metrics import EvaluationError
    from nepcore.io.nep_in import NepInError
    from nepcore.io.nep_txt import NepFileError
    from nepcore.spec import SpecError
    from nepcore.training.checkpoint import CheckpointError
    from nepcore.training.qscaler import QScalerError
    from nepcore.training.stage import TrainingError
    from nepcore.training.start import StartModelError

    for error in (
        StructureError,
        FramesError,
        DatasetFileError,
        ExportError,
        EvaluationError,
        NepInError,
        NepFileError,
        SpecError,
        CheckpointError,
        QScalerError,
        TrainingError,
        StartModelError,
        SettingError,
    ):
        assert issubclass(error, NepcoreError), error


def test_missing_files_are_user_errors(tmp_path, capsys):
    missing = tmp_path / "absent"
    runs = [
        ["export-xyz", f"{missing}.h5", "-o", str(tmp_path / "t.xyz")],
        ["predict", "--model", f"{missing}.txt", str(tmp_path / "x.xyz"), "-o", str(tmp_path / "p")],
        ["qscaler", f"{missing}.h5", "-o", str(tmp_path / "q.json"), "--nep-in", f"{missing}.in"],
        ["convert", f"{missing}.xyz", "-o", str(tmp_path / "s.h5")],
    ]
    for argv in runs:
        assert cli.main(argv) == 1, argv
        err = capsys.readouterr().err
        assert err.startswith("error: ") and str(missing) in err and err.count("\n") == 1, (argv, err)
