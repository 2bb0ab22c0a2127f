"""`#SBATCH` lines read back by a model of sbatch's own parser: every value as the spec has it.

The model ports Slurm 22.05's `_opt_batch_script` and `get_argument` (src/sbatch/opt.c) and, for
the --output path, `_create_batch_fname` and `remove_path_slashes` (src/slurmd/common/fname.c),
the parts a file name of ours can meet: `%%`, `%j` and backslashes.
"""

from __future__ import annotations

import random
import shlex
from pathlib import Path

import pytest

from launcher.cli.main import main
from launcher.common.errors import SpecError
from launcher.slurm import submit
from launcher.slurm.submit import batch_script, sbatch_word, write_job
from launcher.spec.load import parse_spec
from tests.conftest import write_spec

C_SPACE = b" \t\n\v\f\r"  # C isspace() in the C locale


class SbatchFatal(Exception):
    """Where sbatch itself stops with `fatal()`."""


def get_argument(line: bytes) -> tuple[bytes | None, int]:
    """The next word of `line` and how many bytes it took; None when the line has no more."""
    i = 0
    while i < len(line) and line[i] in C_SPACE:
        i += 1
    for separator in (b"packjob", b"hetjob"):
        end = i + len(separator)
        if line[i:end].lower() == separator and (end == len(line) or line[end] in C_SPACE):
            line = line[:i] + b" " * len(separator) + line[end:]
    if line[i : i + 1] == b":":
        raise SbatchFatal("Unexpected `:`")
    argument: bytes | None = None
    quoted, quote, escape = False, 0, False
    while i < len(line) and (quoted or line[i] not in C_SPACE) and line[i] != ord("\n"):
        char = line[i]
        if escape:
            escape = False
        elif char == ord("\\"):
            escape = True
            i += 1
            continue
        elif quoted:
            if char == quote:
                quoted = False
                i += 1
                continue
        elif char in b"\"'":
            quoted, quote = True, char
            i += 1
            continue
        elif char == ord("#"):  # an unescaped #: the rest of the line is a comment
            break
        argument = (argument or b"") + bytes([char])
        i += 1
    if quoted:
        raise SbatchFatal(f"Unmatched `{chr(quote)}`")
    return argument, i


def sbatch_argv(script: str) -> list[str]:
    """The options sbatch collects from the `#SBATCH` lines of `script` (before the first command)."""
    found = []
    for raw in script.encode().split(b"\n"):
        line = raw.split(b"\0")[0]  # a C string
        if line.startswith(b"#SBATCH"):
            rest = line[len(b"#SBATCH") :]
        elif line.startswith(b"#SLURM"):
            rest = line[len(b"#SLURM") :]
        else:
            stripped = line.lstrip(C_SPACE)
            if stripped and not stripped.startswith(b"#"):
                break  # a command: sbatch reads no further
            continue
        while True:
            word, used = get_argument(rest)
            if word is None:
                break
            found.append(word.decode())
            rest = rest[used:]
    return found


def output_file(pattern: str, job_id: int) -> str:
    """The file name slurmstepd makes of an --output pattern for batch job `job_id`."""
    if "\\" in pattern:  # remove_path_slashes: "\\" -> "\", a lone "\" vanishes, nothing is expanded
        return pattern.replace("\\\\", "\0").replace("\\", "").replace("\0", "\\")
    out, i = [], 0
    while i < len(pattern):
        if pattern[i] == "%":
            code = pattern[i + 1 : i + 2]
            assert code in ("%", "j"), f"the model knows %% and %j only: {pattern!r}"
            out.append("%" if code == "%" else str(job_id))
            i += 2
        else:
            out.append(pattern[i])
            i += 1
    return "".join(out)


def option(argv: list[str], name: str) -> str:
    (value,) = [a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")]
    return value


NASTY = [
    "plain",
    "trailing backslash\\",
    "\\",
    "\\\\",
    "a \"double\" and 'single' quote",
    "'",
    '"',
    "#not a comment",
    "a # b",
    "tab\tand\rreturn and\vvertical",
    ":leading colon",
    "hetjob",
    "PackJob",
    "50% %j %%",
    "$HOME `id` $(id) ${x}",
    "unicode é ü \u2028 \u0085 \U0001f600",
    " leading and trailing ",
]
ALPHABET = " \t\r\\\"'#:%$`ab-=é\u2028"


def test_shell_quoting_leaves_a_quote_open_for_sbatch() -> None:
    """The old writer's output: sbatch reads `\\'` as an escaped quote and stops."""
    with pytest.raises(SbatchFatal, match="Unmatched"):
        sbatch_argv(f"#!/bin/bash\n#SBATCH {shlex.quote('--comment=a' + chr(92))}\n")


def test_every_value_reads_back_as_written() -> None:
    rng = random.Random(2205)
    values = NASTY + ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 12))) for _ in range(2000)]
    for value in values:
        line = f"#SBATCH {sbatch_word(value)}"
        assert sbatch_argv(f"#!/bin/bash\n{line}\n") == [value], line
    script = "#!/bin/bash\n" + "".join(f"#SBATCH {sbatch_word(v)}\n" for v in NASTY) + "exec true\n"
    assert sbatch_argv(script) == NASTY


def test_plain_words_stay_bare() -> None:
    assert sbatch_word("--nodes=4") == "--nodes=4"
    assert sbatch_word("--output=/runs/r/slurm-%j.out") == "--output=/runs/r/slurm-%j.out"
    assert sbatch_word("hetjob") == '"hetjob"' and sbatch_word(":x") == '":x"'


@pytest.mark.parametrize("value", ["", "a\nb", "a\0b"])
def test_what_no_line_can_hold_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="holds"):
        sbatch_word(value)


def test_the_batch_script_gives_sbatch_the_specs_values() -> None:
    workdir = "/data/my proj/\"q\" 'x' #1 \\ 50% end\\"
    comment = "--comment=a \\ b \"c\" 'd' #e $HOME\\"
    spec = parse_spec(
        {
            "name": "r",
            "workdir": workdir,
            "python": "/opt/py thon/bin/python3",
            "slurm": {
                "nodes": 2,
                "partition": "gpu",
                "sbatch_options": [comment, "--constraint=a100|h100", "--mail-user=a@b.c"],
            },
        },
        hosts_from=lambda first: None,
    )
    run_dir = Path("/runs/50% #x 'q' \"d\" %j/r")
    script = batch_script(spec, run_dir / "submitted-spec.json", run_dir)
    argv = sbatch_argv(script)
    assert argv == [
        "--job-name=r",
        "--nodes=2",
        "--no-kill",
        "--ntasks-per-node=1",
        f"--output={str(run_dir).replace('%', '%%')}/slurm-%j.out",
        "--open-mode=append",
        f"--chdir={workdir}",
        "--requeue",
        "--signal=TERM@120",
        "--partition=gpu",
        comment,
        "--constraint=a100|h100",
        "--mail-user=a@b.c",
    ]
    assert output_file(option(argv, "output"), 7) == f"{run_dir}/slurm-7.out"
    exec_line = script.rstrip("\n").splitlines()[-1]
    assert shlex.split(exec_line) == [
        "exec",
        "/opt/py thon/bin/python3",
        "-P",  # the job's working directory is not on the launcher's sys.path
        "-m",
        "launcher",
        "--cluster",
        str(run_dir / "submitted-spec.json"),
        "--slurm",
        "--plain",
    ]


def test_a_run_directory_with_a_backslash_is_refused_naming_run_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_root = tmp_path / "a\\b"
    spec = {"name": "r", "run_root": str(run_root), "slurm": {}}
    path = write_spec(tmp_path, spec)
    assert main(["slurm", "submit", "--cluster", str(path), "--print"]) == 2
    err = capsys.readouterr().err
    assert "$.run_root" in err and "backslash" in err and "Traceback" not in err
    parsed = parse_spec(spec, hosts_from=lambda first: None)
    with pytest.raises(SpecError, match=r"\$\.run_root"):
        write_job(parsed, run_root / "r")
    assert not run_root.exists(), "nothing is written for a job that cannot be submitted"


def test_a_working_directory_no_line_can_hold_is_refused_naming_workdir(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = parse_spec({"name": "r", "run_root": "/runs", "slurm": {}}, hosts_from=lambda first: None)
    monkeypatch.setattr(submit.os, "getcwd", lambda: "/home/u/odd\ndir")
    with pytest.raises(SpecError) as raised:
        batch_script(spec, Path("/runs/r/submitted-spec.json"), Path("/runs/r"))
    assert [p.path for p in raised.value.problems] == ["$.workdir"]
    assert "newline" in str(raised.value) and "set workdir" in str(raised.value)


def test_spec_validation_refuses_what_sbatch_cannot_be_given() -> None:
    with pytest.raises(SpecError) as raised:
        parse_spec(
            {"name": "r", "slurm": {"sbatch_options": ["--comment=a\nb", "--comment=a\0b"]}},
            hosts_from=lambda first: None,
        )
    paths = {p.path for p in raised.value.problems}
    assert paths == {"$.slurm.sbatch_options[0]", "$.slurm.sbatch_options[1]"}


def test_an_option_the_launcher_writes_itself_is_refused_with_the_field_to_use() -> None:
    slurm = {
        "sbatch_options": ["--qos=high", "--output=/etc/x", "--wrap=ls", "--gpus=8", "--time=1:00"],
        "srun_options": ["--input=none", "--cpu-bind=cores", "--label"],
    }
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "r", "slurm": slurm}, hosts_from=lambda first: None)
    said = {p.path: p.message for p in caught.value.problems}
    assert sorted(said) == [
        "$.slurm.sbatch_options[1]",
        "$.slurm.sbatch_options[2]",
        "$.slurm.sbatch_options[4]",
        "$.slurm.srun_options[0]",
        "$.slurm.srun_options[2]",
    ], said
    assert (
        "from run_root" in said["$.slurm.sbatch_options[1]"] and "slurm.time_limit" in said["$.slurm.sbatch_options[4]"]
    )


def test_spare_nodes_are_allocated_beside_the_hosts_and_become_spares_inside() -> None:
    data = {"name": "r", "slurm": {"nodes": 2, "spare_nodes": 1, "port": 7000}}
    spec = parse_spec(data, hosts_from=lambda first: None)
    argv = sbatch_argv(batch_script(spec, Path("/runs/r/submitted-spec.json"), Path("/runs/r")))
    assert "--nodes=3" in argv and "--no-kill" in argv
    nodes = [{"address": f"10.0.0.{i}", "workers": 1, "ports": [7000]} for i in (1, 2, 3)]
    inside = parse_spec(data, hosts_from=lambda first: nodes)
    assert [h.address for h in inside.hosts] == ["10.0.0.1", "10.0.0.2"]
    assert [h.address for h in inside.spare_hosts] == ["10.0.0.3"]
    with pytest.raises(SpecError, match=r"elastic.min_hosts.*fewer than slurm.nodes \(2\)"):
        parse_spec({**data, "elastic": {"min_hosts": 2}}, hosts_from=lambda first: None)
    with pytest.raises(SpecError, match=r"spare_hosts.*set slurm.spare_nodes"):
        parse_spec({**data, "spare_hosts": nodes[2:]}, hosts_from=lambda first: None)
    with pytest.raises(SpecError, match=r"spare_nodes.*over 4096"):
        parse_spec({"name": "r", "slurm": {"nodes": 4096, "spare_nodes": 1}}, hosts_from=lambda first: None)
    unsized = parse_spec({"name": "r"}, hosts_from=lambda first: nodes)
    assert len(unsized.hosts) == 3 and not unsized.spare_hosts, "without slurm.nodes every node is a host"
