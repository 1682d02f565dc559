"""opaque-ops scaffold: a kernel package from a model, installed, wheeled, written and tested.

The model is built here with three custom ops no test has seen: ``Shrink``
(a flexbuffer map of five kinds of value, with two nodes giving different
values), ``Packed12`` (12 raw bytes) and ``FlexRoll`` (a Flex op whose NodeDef
is written by an encoder in this file, from the protobuf spec).  Everything
runs for real: the generated C is compiled, pip installs the project, the
generated tests run under pytest in a child process.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import struct
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from flatbuffers import flexbuffers

from opaque_ops.model import ModelBuilder
from tests.helpers.child_process import ChildResult, run_python
from tests.helpers.manifest_text import manifest_of
from tests.helpers.mediapipe_models import model_file

ROOT = Path(__file__).resolve().parents[2]
NAME = "shrink_ops"

SHRINK_A = {"lambda": 0.25, "mode": "soft", "axis": -1, "enabled": True, "scales": [0.5, 1, 2]}
SHRINK_B = {"lambda": 1, "mode": "hard", "axis": 1, "enabled": False, "scales": [3, 4]}
RAW12 = struct.pack("<ihhf", 9, -2, 300, 1.5)


# -- a protobuf wire encoder from the spec (varints, tags, length-delimited fields), for the NodeDef.


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def ld(field: int, payload: bytes) -> bytes:
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def attr(name: str, value: bytes) -> bytes:
    return ld(5, ld(1, name.encode()) + ld(2, value))


def roll_options() -> bytes:
    # NodeDef {name: "roll", op: "Roll", attr {T: float32, Tshift: int32, shift: 2, axes: [1, 0], wrap: true}}
    node = (
        ld(1, b"roll")
        + ld(2, b"Roll")
        + attr("T", varint(6 << 3) + varint(1))
        + attr("Tshift", varint(6 << 3) + varint(3))
        + attr("shift", varint(3 << 3) + varint(2))
        + attr("axes", ld(1, ld(3, varint(1) + varint(0))))
        + attr("wrap", varint(5 << 3) + varint(1))
    )
    fbb = flexbuffers.Builder()
    with fbb.Vector():
        fbb.String("Roll")
        fbb.String(node.decode("ascii"))
    return bytes(fbb.Finish())


def child_env(*paths, **extra) -> dict:
    """How a child runs: this checkout's opaque_ops first on the path (plus ``paths``), and ``extra``
    variables (None removes one). Keywords for :func:`tests.helpers.child_process.run_python`."""
    return {"pythonpath": [*map(str, paths), str(ROOT)], "env": extra}


def cli(*args, env=None, cwd=None, timeout=600) -> ChildResult:
    return run_python("-m", "opaque_ops", *args, cwd=cwd, timeout=timeout, **(env or child_env()))


def pip(*args, env=None) -> ChildResult:
    r = run_python("-m", "pip", *args, timeout=900, **(env or child_env()))
    assert r.returncode == 0, r.stdout + r.stderr
    return r


# -rN: no short summary, so each failure's message is printed once (pytest
# does not cut the summary's lines under CI, where they repeat it whole).
PYTEST = ("-m", "pytest", "-q", "-rN", "-p", "no:cacheprovider")


def run_pytest(tests: Path, env=None) -> ChildResult:
    return run_python(*PYTEST, tests, cwd=tests.parent, timeout=900, **(env or child_env()))


def summary(r: ChildResult) -> str:
    return r.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("scaffold")


@pytest.fixture(scope="module")
def model(work) -> Path:
    b = ModelBuilder()
    x = b.add_tensor("x", [2, 3], np.float32)
    a = b.add_tensor("a", [2, 3], np.float32)
    s = b.add_tensor("s", [2, 3], np.float32)
    p = b.add_tensor("p", [6], np.int32)
    r = b.add_tensor("r", [2, 3], np.float32)
    b.add_custom_op("Shrink", [x], [a], options=SHRINK_A)
    b.add_custom_op("Shrink", [a], [s], options=SHRINK_B)
    b.add_custom_op("Packed12", [s], [p], options=RAW12)
    b.add_custom_op("FlexRoll", [s, p], [r], options=roll_options(), version=2)
    b.set_inputs([x])
    b.set_outputs([r, p])
    path = work / "three new ops.tflite"
    path.write_bytes(b.build())
    return path


@pytest.fixture(scope="module")
def project(work, model) -> Path:
    out = work / "proj"
    r = cli("scaffold", model, "-o", out, "--name", NAME)
    assert r.returncode == 0, r.stderr
    return out


# The options as the generated C must print them (from the model, not from the C).
SHRINK_A_SHOWN = "Shrink: not implemented yet (options: axis=-1 enabled=true lambda=0.25 mode=soft scales=[0.5, 1, 2])"
SHRINK_B_SHOWN = "Shrink: not implemented yet (options: axis=1 enabled=false lambda=1 mode=hard scales=[3, 4])"
PACKED_SHOWN = "Packed12: not implemented yet (options: 12 bytes " + RAW12.hex() + " int32=[9, 19726334, 1069547520])"
ROLL_SHOWN = "FlexRoll: not implemented yet (options: op=Roll T=float32 Tshift=int32 shift=2 axes=[1, 0] wrap=true)"


def test_project_layout_and_c_files(project, model):
    files = sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())
    assert files == sorted(
        [
            "README.md",
            "pyproject.toml",
            "setup.py",
            "tests/test_flex_roll.py",
            "tests/test_packed12.py",
            "tests/test_shrink.py",
            f"{NAME}/__init__.py",
            f"{NAME}/c/flex_roll.c",
            f"{NAME}/c/packed12.c",
            f"{NAME}/c/shrink.c",
        ]
    )
    shrink = (project / NAME / "c" / "shrink.c").read_text()
    assert "OPAQUE_OP(OP_NAME, 1," in shrink and '#define OP_NAME "Shrink"' in shrink
    # One struct field and one checked flex.h read per key, typed from the model's values:
    # the two nodes give scales as floats and as ints, so it is read as numbers.
    for decl, call in [
        ("double lambda;", 'oo_flex_get_double(d->buffer, d->length, "lambda"'),
        ("const char* mode;", 'oo_flex_get_string(d->buffer, d->length, "mode"'),
        ("int64_t axis;", 'oo_flex_get_int(d->buffer, d->length, "axis"'),
        ("int enabled;", 'oo_flex_get_bool(d->buffer, d->length, "enabled"'),
        ("double* scales;", 'oo_sc_get_doubles(d->buffer, d->length, "scales"'),
    ]:
        assert decl in shrink and call in shrink
    assert shrink.count("oo_opts_fail(&d->opts, OP_NAME, \"option '%s'") == 5
    # The recorded shapes: the output gets its shape, the input must have its shape.
    assert "static const int out0[2] = {2, 3};" in shrink and "static const int in0[2] = {2, 3};" in shrink
    assert 'oo_sc_check_input(context, node, 0, 2, in0, "[2, 3]", OO_SC_FIXED_HOW)' in shrink
    assert "ty != kTfLiteFloat32" in shrink
    packed = (project / NAME / "c" / "packed12.c").read_text()
    assert "if (d->length != 12)" in packed and "ty != kTfLiteInt32" in packed
    roll = (project / NAME / "c" / "flex_roll.c").read_text()
    assert "OPAQUE_OP(OP_NAME, 2," in roll and 'strcmp(d->tf_op, "Roll")' in roll
    for name in ("T", "Tshift", "shift", "axes", "wrap"):
        assert f'oo_nd_attr(d->node_def, d->node_def_len, "{name}"' in roll
    pyproject = (project / "pyproject.toml").read_text()
    assert '[project.entry-points."opaque_ops.kernels"]' in pyproject and f'{NAME} = "{NAME}:kernels"' in pyproject
    readme = (project / "README.md").read_text()
    assert "pip install --no-build-isolation --no-deps ." in readme
    assert "OPAQUE_OPS_WHEEL_ARCH=aarch64 pip wheel --no-build-isolation --no-deps" in readme


def test_refuses_a_non_empty_directory_unless_forced(project, model):
    c_file = project / NAME / "c" / "shrink.c"
    before = c_file.read_text()
    c_file.write_text(before + "/* the author's work */\n")
    r = cli("scaffold", model, "-o", project, "--name", NAME)
    assert r.returncode == 1 and "is not empty" in r.stderr and "--force" in r.stderr
    assert c_file.read_text().endswith("/* the author's work */\n")
    r = cli("scaffold", model, "-o", project, "--name", NAME, "--force")
    assert r.returncode == 0, r.stderr
    assert c_file.read_text() == before


def test_usage_errors(work, model):
    r = cli("scaffold", model, "-o", work / "x1", "--name", "mediapipe")
    assert r.returncode == 1 and "bundled kernel's name" in r.stderr
    r = cli("scaffold", model, "-o", work / "x2", "--name", "not-an-identifier")
    assert r.returncode == 1 and "Python identifier" in r.stderr
    r = cli("scaffold", model, "-o", work / "x3", "--name", "ok", "--op", "Nope")
    assert r.returncode == 1 and "no custom op 'Nope'" in r.stderr and "Shrink" in r.stderr
    assert not (work / "x1").exists() and not (work / "x3").exists()


@pytest.mark.parametrize(
    ("name", "says"),
    [
        # pip would uninstall opaque-ops itself to install the project (a new user's report).
        ("opaque_ops", "installed distribution opaque-ops"),
        ("numpy", "installed distribution numpy"),
        ("json", "standard library"),
    ],
)
def test_a_name_that_is_taken_in_this_python_is_refused(work, model, name, says):
    r = cli("scaffold", model, "-o", work / name, "--name", name)
    assert r.returncode == 1 and says in r.stderr and f"{name}_kernels" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (work / name).exists()


@pytest.mark.parametrize("name", ["names", "all_kernels", "package_kernels"])
def test_a_name_that_opaque_ops_kernels_defines_is_refused(work, model, name):
    # opaque_ops.kernels.NAME() would be that function, never the package (a new user's report).
    r = cli("scaffold", model, "-o", work / f"k_{name}", "--name", name)
    assert r.returncode == 1 and "is a function of opaque_ops.kernels" in r.stderr, r.stderr
    assert not (work / f"k_{name}").exists()


# Op names and option keys a hostile model may hold.  Each used to become
# code: "*/" ended the C file's header comment (the constructor ran when the
# library was loaded), '"""' ended the test file's docstring (pytest ran the
# rest).  The sentinel files must never appear.
def _hostile_names(tmp: Path) -> list[str]:
    c_pwn = tmp / "pwned_c"
    py_pwn = tmp / "pwned_py"
    return [
        "Pwn*/ int system(const char*); __attribute__((constructor)) static void pwn(void) "
        f'{{ system("touch {c_pwn}"); }} /*',
        f'Pwn2"""; import pathlib; pathlib.Path({str(py_pwn)!r}).touch(); """',
        "Splice\\\nint spliced;??/\x1b[31mred",  # a backslash-newline, a trigraph, an escape sequence
    ]


def test_hostile_op_names_and_option_keys_stay_text(work):
    tmp = work / "hostile"
    tmp.mkdir()
    names = _hostile_names(tmp)
    b = ModelBuilder()
    x = b.add_tensor("x", [3], np.float32)
    prev = x
    for i, name in enumerate(names):
        y = b.add_tensor(f"y{i}", [3], np.float32)
        # Keys that are C keywords or the generated code's macros, and one that ends a comment.
        b.add_custom_op(name, [prev], [y], options={"default": 1, "auto": 2.0, "float": 3, "OP_NAME": 4, "k*/": 5})
        prev = y
    b.set_inputs([x])
    b.set_outputs([prev])
    path = tmp / 'model* """ \\.tflite'  # (a file name cannot hold a slash)
    path.write_bytes(b.build())
    out = tmp / "proj"
    r = cli("scaffold", path, "-o", out, "--name", "hostile_ops")
    assert r.returncode == 0, r.stderr
    r = run_pytest(out / "tests")
    # The C compiled (the kernel is found under its exact name and says it is
    # not written yet) and every test file ran as generated.
    assert summary(r).startswith("3 failed in"), r.stdout + r.stderr
    assert r.stdout.count("is not written yet: write ") == 3, r.stdout
    assert not (tmp / "pwned_c").exists() and not (tmp / "pwned_py").exists()
    r = run_python("-c", "import hostile_ops; print(hostile_ops.__doc__)", **child_env(out))
    assert r.returncode == 0 and "Kernels for Pwn*/ int system" in r.stdout, r.stdout + r.stderr


def test_what_to_run_next_names_the_directory_as_pip_needs_it(work, model):
    # "pip install ... my_kernels" is a project name on the package index to
    # pip, not the directory (a new user's report): a relative path gets ./, quoted.
    r = cli("scaffold", model, "-o", "rel proj", "--name", "rel_ops", cwd=work)
    assert r.returncode == 0, r.stderr
    assert "pip install --no-build-isolation --no-deps './rel proj'   then --ops kernels:rel_ops" in r.stdout, r.stdout
    assert "next: python -m pytest 'rel proj/tests'" in r.stdout, r.stdout


# scaffold in a child whose files may not grow past 4 KiB (RLIMIT_FSIZE; with
# SIGXFSZ ignored a bigger write fails with EFBIG): the C file, the first
# big one, fails part way, as on a full disk.
SMALL_FILES = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
from opaque_ops.cli.commands import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_failed_write_leaves_no_half_written_project(work, model):
    # A partial project (an empty __init__.py) was left, and the next run
    # refused the directory as the user's work (a new user's report).
    parent = work / "small"
    parent.mkdir()
    out = parent / "proj"
    r = run_python("-c", SMALL_FILES, "scaffold", model, "-o", out, "--name", "small_ops", **child_env())
    assert r.returncode == 1 and "could not write the project: " in r.stderr, r.stdout + r.stderr
    assert f"{out} was left as it was" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert list(parent.iterdir()) == [], list(parent.iterdir())  # no project, no staging directory
    # Written in full, then over it with --force under the limit: each file old or new, never cut.
    r = cli("scaffold", model, "-o", out, "--name", "small_ops")
    assert r.returncode == 0, r.stderr
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~_umask(), oct(out.stat().st_mode)
    for p in before:  # (so that a replaced file can be told from a kept one)
        p.write_bytes(before[p] + b"\n")
    r = run_python("-c", SMALL_FILES, "scaffold", model, "-o", out, "--name", "small_ops", "--force", **child_env())
    assert r.returncode == 1 and "files were replaced (" in r.stderr, r.stderr
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert set(after) == set(before), set(after) ^ set(before)  # no .part file left
    assert all(after[p] in (before[p], before[p] + b"\n") for p in after)
    assert any(after[p] == before[p] for p in after) and any(after[p] == before[p] + b"\n" for p in after)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_add_puts_more_ops_into_a_project_and_leaves_its_own_files(work, model):
    # --force was the only way to add an op, and it wrote pyproject.toml,
    # README.md and __init__.py over the author's edits (a new user's report).
    out = work / "grows"
    r = cli("scaffold", model, "-o", out, "--name", "grows_ops", "--op", "Shrink")
    assert r.returncode == 0, r.stderr
    own = [out / "pyproject.toml", out / "setup.py", out / "README.md", out / "grows_ops" / "__init__.py"]
    for path in own:  # the author's edits
        path.write_text(path.read_text() + "\n# edited\n")
    before = {path: path.read_text() for path in own}
    r = cli("scaffold", model, "-o", out, "--name", "grows_ops", "--op", "Packed12", "--add")
    assert r.returncode == 0, r.stderr
    assert "left pyproject.toml, setup.py, README.md and grows_ops/__init__.py as they were" in r.stdout
    assert {path: path.read_text() for path in own} == before
    assert sorted(p.name for p in (out / "grows_ops" / "c").iterdir()) == ["packed12.c", "shrink.c"]
    # An op the project has: its kernel and test are the author's work.
    (out / "grows_ops" / "c" / "packed12.c").write_text(
        "/* my kernel */\n" + (out / "grows_ops" / "c" / "packed12.c").read_text()
    )
    r = cli("scaffold", model, "-o", out, "--name", "grows_ops", "--op", "Packed12", "--add")
    assert r.returncode == 1 and "the project has 'Packed12' already" in r.stderr, r.stderr
    assert (out / "grows_ops" / "c" / "packed12.c").read_text().startswith("/* my kernel */")
    r = cli("scaffold", model, "-o", out, "--name", "grows_ops", "--op", "Packed12", "--add", "--force")
    assert r.returncode == 0 and not (out / "grows_ops" / "c" / "packed12.c").read_text().startswith("/* my"), r.stderr
    assert {path: path.read_text() for path in own} == before
    # Both ops' generated tests run: Shrink's two option sets and Packed12's one, each "not written yet".
    r = run_pytest(out / "tests")
    assert summary(r).startswith("3 failed in") and r.stdout.count("is not written yet") == 3, r.stdout
    # --add where no project is.
    r = cli("scaffold", model, "-o", work / "nothing_here", "--name", "grows_ops", "--add")
    assert r.returncode == 1 and "--add writes ops into a project scaffolded before" in r.stderr, r.stderr


def test_a_directory_name_that_is_not_utf8_is_written_escaped(work, model):
    # The README quotes the command line; a name's non-UTF-8 byte (a lone
    # surrogate in Python) could not be written: a codec error (a review's report).
    out = Path(os.fsdecode(os.fsencode(str(work)) + b"/x\xff dir"))
    r = cli("scaffold", model, "-o", out, "--name", "odd_dir_ops")
    assert r.returncode == 0, r.stderr
    assert "\\xff" in (out / "README.md").read_text(), (out / "README.md").read_text()
    # The generated tests compile and run there (the build path digested and
    # printed such paths as UTF-8 text: codec errors).  Their output names the
    # path, so it is read as bytes here.
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run(
        [sys.executable, *PYTEST, out / "tests"],
        cwd=out,
        capture_output=True,
        env=env,
        timeout=900,
    )
    text = done.stdout.decode("utf-8", "replace")
    assert text.strip().splitlines()[-1].startswith("4 failed in"), text
    assert text.count("is not written yet") == 4, text


def test_a_long_op_name_gets_a_short_file_name(work):
    long_a, long_b = "Op" + "x" * 300 + "A", "Op" + "x" * 300 + "B"
    b = ModelBuilder()
    x = b.add_tensor("x", [3], np.float32)
    y = b.add_tensor("y", [3], np.float32)
    z = b.add_tensor("z", [3], np.float32)
    b.add_custom_op(long_a, [x], [y])
    b.add_custom_op(long_b, [y], [z])
    b.set_inputs([x])
    b.set_outputs([z])
    path = work / "long.tflite"
    path.write_bytes(b.build())
    r = cli("scaffold", path, "-o", work / "long_proj", "--name", "long_ops")
    assert r.returncode == 0, r.stderr
    stems = sorted(p.stem for p in (work / "long_proj" / "long_ops" / "c").glob("*.c"))
    assert len(stems) == 2 and all(len(s) <= 64 for s in stems) and stems[0] != stems[1], stems
    r = run_pytest(work / "long_proj" / "tests")
    assert summary(r).startswith("2 failed in") and r.stdout.count("is not written yet") == 2, r.stdout


def test_an_installed_kernel_package_may_be_scaffolded_again(work, model, monkeypatch):
    # Re-scaffolding one's own kernel package (installed, so importable)
    # is the --force workflow; only other packages' names are refused.
    from opaque_ops.cli import scaffold
    from opaque_ops.cli.common import CliError

    with pytest.raises(CliError, match="installed distribution numpy"):
        scaffold.write_project(model, work / "mine", "numpy")
    monkeypatch.setattr("opaque_ops.kernels.installed_packages", lambda: {"numpy": "numpy"})
    assert scaffold.write_project(model, work / "mine", "numpy")
    # Only a kernel package of this project's distribution name: another
    # distribution's entry point named numpy does not make numpy free.
    monkeypatch.setattr("opaque_ops.kernels.installed_packages", lambda: {"numpy": "thirdparty-kernels", "site": "x"})
    with pytest.raises(CliError, match="installed distribution numpy"):
        scaffold.write_project(model, work / "mine2", "numpy")
    with pytest.raises(CliError, match="standard library"):
        scaffold.write_project(model, work / "mine3", "site")


def test_an_installed_namespace_package_is_taken(work, model, monkeypatch):
    # google, backports: namespace packages that installed distributions
    # share; a regular package of that name would hide their parts.
    import site

    from opaque_ops.cli import scaffold
    from opaque_ops.cli.common import CliError

    site_dir = work / "site-packages"
    (site_dir / "sharedns" / "part").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(site_dir))
    monkeypatch.setattr(site, "getsitepackages", lambda: [str(site_dir)])
    with pytest.raises(CliError, match=r"'sharedns' is an installed namespace package \("):
        scaffold.write_project(model, work / "ns", "sharedns")


def test_the_projects_own_package_on_the_path_is_not_taken(work, model, monkeypatch):
    # Scaffolded into the current directory, the package is importable from
    # there; scaffolding it again (--force) is allowed, as is a bare
    # directory of that name (the guide's `-o my_kernels`, run from its parent).
    from opaque_ops.cli import scaffold
    from opaque_ops.cli.common import CliError

    here = work / "here"
    scaffold.write_project(model, here, "kernels_here")
    (work / "elsewhere" / "kernels_there").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(here))
    monkeypatch.syspath_prepend(str(work / "elsewhere"))
    assert scaffold.write_project(model, here, "kernels_here", force=True)
    assert scaffold.write_project(model, work / "there", "kernels_there")
    # A real module of that name elsewhere on the path is another package's.
    (work / "elsewhere" / "kernels_mod.py").write_text("")
    with pytest.raises(CliError, match=r"already an importable module .*kernels_mod\.py"):
        scaffold.write_project(model, work / "mod", "kernels_mod")


def test_generated_tests_run_and_fail_with_what_to_write(project):
    r = run_pytest(project / "tests")
    assert r.returncode == 1, r.stdout + r.stderr
    # Every case fails; none errors or is skipped: one Shrink case per distinct option set.
    assert summary(r).startswith("4 failed in"), r.stdout
    for shown in (SHRINK_A_SHOWN, SHRINK_B_SHOWN, PACKED_SHOWN, ROLL_SHOWN):
        assert shown in r.stdout
    assert "Shrink is not written yet: write ShrinkInvoke in" in r.stdout and "and reference() in" in r.stdout


ALLOCATE_AND_RUN = r"""
import json, sys
import numpy as np
import opaque_ops as oo
from opaque_ops.testing import run_op

model, opts = sys.argv[1], json.loads(sys.argv[2])
lib = getattr(oo.kernels, sys.argv[3])()
it = oo.Interpreter(model_path=model, custom_ops=[lib])
it.allocate_tensors()
out = {"prebuilt": [l.prebuilt for l in lib.libraries], "paths": [str(l.path) for l in lib.libraries],
       "shapes": [[int(x) for x in d["shape"]] for d in it.get_output_details()], "oo": oo.__file__}
try:
    it.invoke()
except oo.KernelError as exc:
    out["invoke"] = str(exc)
for op, (hexopts, version, ins, outs) in opts.items():
    try:
        run_op(lib, op, [np.ones(s, d) for d, s in ins], options=bytes.fromhex(hexopts), version=version,
               num_outputs=[(s, d) for d, s in outs])
    except oo.KernelError as exc:
        out[op] = str(exc)
print("RESULT " + json.dumps(out))
"""


def op_cases():
    return json.dumps(
        {
            "Shrink": [flex_map(SHRINK_B).hex(), 1, [["float32", [2, 3]]], [["float32", [2, 3]]]],
            "Packed12": [RAW12.hex(), 1, [["float32", [2, 3]]], [["int32", [6]]]],
            "FlexRoll": [roll_options().hex(), 2, [["float32", [2, 3]], ["int32", [6]]], [["float32", [2, 3]]]],
        }
    )


def flex_map(d) -> bytes:
    from opaque_ops.model import flex_options

    return flex_options(d)


def result(r: ChildResult) -> dict:
    line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, r.stdout + r.stderr
    return json.loads(line[len("RESULT ") :])


def test_pip_install_then_kernels_name_finds_it(project, model, work):
    site = work / "site"
    pip("install", "-q", "--no-build-isolation", "--no-deps", "--target", site, project)
    assert (site / NAME / "c" / "shrink.c").is_file()
    r = run_python("-c", ALLOCATE_AND_RUN, model, op_cases(), NAME, cwd=work, timeout=600, **child_env(site))
    out = result(r)
    assert out["oo"].startswith(str(ROOT))
    assert out["prebuilt"] == [False, False, False]  # compiled on first use, through compile_ops' cache
    assert out["shapes"] == [[2, 3], [6]]  # allocate_tensors() worked as generated
    assert SHRINK_A_SHOWN in out["invoke"]  # the model's first node
    assert SHRINK_B_SHOWN in out["Shrink"] and PACKED_SHOWN in out["Packed12"] and ROLL_SHOWN in out["FlexRoll"]
    # --ops kernels:NAME finds it too: the doctor says the model would run.
    r = cli("doctor", model, "--ops", f"kernels:{NAME}", env=child_env(site))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"--ops kernels:{NAME}: FlexRoll v2, Packed12 v1, Shrink v1" in r.stdout, r.stdout


def test_broken_kernel_package_is_named_and_bundled_kernels_still_work(work, model):
    site = work / "broken_site"
    dist = site / "broken_kernels-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-kernels\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[opaque_ops.kernels]\nbroken = no_such_module_here:kernels\n")
    code = (
        "import opaque_ops as oo\n"
        "print('ATAN', oo.kernels.atan().ops, oo.kernels.by_name('atan').ops)\n"
        "try:\n    oo.kernels.broken()\nexcept oo.OpaqueOpsError as exc:\n    print('ERROR', type(exc).__name__, exc)\n"
    )
    r = run_python("-c", code, timeout=300, **child_env(site))
    assert "ATAN [('Atan', 1)] [('Atan', 1)]" in r.stdout, r.stdout + r.stderr
    assert (
        "ERROR OpLibraryError kernel package 'broken-kernels' (entry point broken = no_such_module_here:kernels "
        "in opaque_ops.kernels) is broken: ModuleNotFoundError"
    ) in r.stdout, r.stdout + r.stderr
    r = cli("run", model, "--ops", "kernels:nothing_by_this_name", env=child_env(site))
    assert r.returncode == 1 and "no bundled kernel or kernel package 'nothing_by_this_name'" in r.stderr
    assert "broken" in r.stderr  # listed among the names that exist


@pytest.fixture(scope="module")
def wheels(project, work) -> dict:
    built = {}
    dist = work / "dist"
    arches = ["x86_64"] + (["aarch64"] if shutil.which("aarch64-linux-gnu-gcc") else [])
    for arch in arches:
        built[arch] = platform_wheel(project, dist, arch)
    return built


def platform_wheel(project: Path, dist: Path, arch: str) -> Path:
    """``pip wheel`` of the project with its kernels prebuilt for ``arch``; the wheel's path."""
    pip(
        "wheel",
        "-q",
        "--no-build-isolation",
        "--no-deps",
        "-w",
        dist,
        project,
        env=child_env(OPAQUE_OPS_WHEEL_ARCH=arch),
    )
    [wheel] = dist.glob(f"{NAME}-*-py3-none-manylinux_2_35_{arch}.whl")
    return wheel


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_platform_wheel_carries_the_prebuilt_libraries(wheels, arch):
    if arch not in wheels:
        pytest.fail("the aarch64 wheel needs aarch64-linux-gnu-gcc (apt-get install gcc-aarch64-linux-gnu)")
    with zipfile.ZipFile(wheels[arch]) as z:
        names = z.namelist()
        assert (
            f"Tag: py3-none-manylinux_2_35_{arch}"
            in z.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()
        )
        assert "[opaque_ops.kernels]" in z.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
        manifest = manifest_of(z.read(f"{NAME}/prebuilt/{arch}/manifest.txt"))
        assert manifest["arch"] == arch and sorted(manifest["kernels"]) == ["flex_roll", "packed12", "shrink"]
        for stem, entry in manifest["kernels"].items():
            lib = z.read(f"{NAME}/prebuilt/{arch}/{stem}.so")
            assert hashlib.blake2b(lib, digest_size=32).hexdigest() == entry["digest"]
            assert hashlib.blake2b(z.read(f"{NAME}/c/{stem}.c"), digest_size=32).hexdigest() == entry["source_digest"]
            assert {0x3E: "x86_64", 0xB7: "aarch64"}[int.from_bytes(lib[18:20], "little")] == arch


def test_a_wheel_built_again_carries_only_the_current_c_files(wheels, project, work):
    # A C file deleted after a build stayed in build/lib and went into the
    # next wheel without its prebuilt library (a new user's report): on a
    # machine with no compiler the package then failed to load at all.
    again = work / "again"
    shutil.copytree(project, again)
    assert any((again / "build").glob(f"lib*/{NAME}/c/flex_roll.c")), "the first wheel's build directory is there"
    (again / NAME / "c" / "flex_roll.c").unlink()
    (again / "tests" / "test_flex_roll.py").unlink()
    wheel = platform_wheel(again, work / "dist_again", "x86_64")
    with zipfile.ZipFile(wheel) as z:
        sources = sorted(Path(n).stem for n in z.namelist() if n.startswith(f"{NAME}/c/") and n.endswith(".c"))
        manifest = manifest_of(z.read(f"{NAME}/prebuilt/x86_64/manifest.txt"))
    assert sources == ["packed12", "shrink"] and sorted(manifest["kernels"]) == sources, (sources, manifest)


def test_a_kernel_that_does_not_compile_fails_the_wheel_with_the_compilers_words(wheels, project, work):
    # It was a long setuptools traceback with the compiler's error near its end (a new user's report).
    broken = work / "broken_wheel"
    shutil.copytree(project, broken)
    c = broken / NAME / "c" / "shrink.c"
    c.write_text(c.read_text() + "\nint oops(void) { return missing_name; }\n")
    r = run_python(
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-build-isolation",
        "--no-deps",
        "-w",
        work / "dist_broken",
        broken,
        timeout=900,
        **child_env(OPAQUE_OPS_WHEEL_ARCH="x86_64"),
    )
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "error: " in out and "missing_name" in out and "shrink.c" in out, out
    assert "Traceback" not in out, out


def test_x86_64_wheel_runs_with_no_compiler(wheels, model, work):
    if os.uname().machine != "x86_64":
        pytest.skip("the x86_64 wheel runs on an x86_64 host")
    site = work / "wheel_site"
    pip("install", "-q", "--no-deps", "--target", site, wheels["x86_64"])
    cache = work / "never_used_cache"
    env = child_env(site, PATH="/nonexistent", OPAQUE_OPS_CACHE_DIR=str(cache), CC=None)
    r = run_python(
        "-c",
        "import shutil; assert shutil.which('cc') is None and shutil.which('gcc') is None\n" + ALLOCATE_AND_RUN,
        model,
        op_cases(),
        NAME,
        cwd=work,
        timeout=600,
        **env,
    )
    out = result(r)
    assert out["prebuilt"] == [True, True, True]
    assert all(p.startswith(str(site / NAME / "prebuilt" / "x86_64")) for p in out["paths"])
    assert not list(cache.glob("*.so")), "nothing may be compiled"
    assert SHRINK_A_SHOWN in out["invoke"] and PACKED_SHOWN in out["Packed12"] and ROLL_SHOWN in out["FlexRoll"]


def test_aarch64_wheel_runs_in_emulated_python(wheels, model, work):
    if shutil.which("qemu-aarch64") is None or "aarch64" not in wheels:
        pytest.skip("needs qemu-aarch64 and aarch64-linux-gnu-gcc")
    from tests.helpers import aarch64_python as arm

    arm.sysroot()
    deps = arm.deps_site()
    site = work / "arm_site"
    # --no-deps: opaque_ops comes from this checkout (on the path), as the Pi flow tests run it.
    arm.pip_install(site, "--no-deps", str(wheels["aarch64"]), wheels=arm.wheels_dir())
    r = arm.run(
        ALLOCATE_AND_RUN.replace("import json, sys", "import json, sys, platform"),
        model,
        op_cases(),
        NAME,
        pythonpath=[site, ROOT, deps],
    )
    out = result(r)
    assert out["prebuilt"] == [True, True, True] and all("/prebuilt/aarch64/" in p for p in out["paths"])
    assert SHRINK_B_SHOWN in out["Shrink"] and PACKED_SHOWN in out["Packed12"] and ROLL_SHOWN in out["FlexRoll"]


# ------------------------------------------------------------ MediaPipe --


def test_mediapipe_landmarks_to_transform_matrix(work):
    from opaque_ops.cli.doctor import describe_options
    from opaque_ops.model import read_model

    face = model_file("modules", "face_landmark", "face_landmark_with_attention.tflite")
    out = work / "mp"
    r = cli("scaffold", face, "-o", out, "--name", "mp_l2t", "--op", "Landmarks2TransformMatrix")
    assert r.returncode == 0, r.stderr
    assert [p.name for p in (out / "mp_l2t" / "c").iterdir()] == ["landmarks2_transform_matrix.c"]
    c_text = (out / "mp_l2t" / "c" / "landmarks2_transform_matrix.c").read_text()
    assert "OPAQUE_OP(OP_NAME, 2," in c_text and 'oo_sc_get_ints(d->buffer, d->length, "subset_idxs"' in c_text
    r = run_pytest(out / "tests")
    assert r.returncode == 1 and summary(r).startswith(("1 failed", "2 failed", "3 failed")), r.stdout
    assert "error" not in summary(r) and "skipped" not in summary(r)
    # Every option value, as the C parsed it, equals what the model holds.
    info = read_model(face)
    node = next(op for sg in info.subgraphs for op in sg.operators if op.op_name == "Landmarks2TransformMatrix")
    entries = {e["key"]: e["value"] for e in describe_options(node.op_name, node.custom_options)["entries"]}
    shown = re.search(r"Landmarks2TransformMatrix: not implemented yet \(options:(.*?)\)\n", r.stdout).group(1)
    for key, value in entries.items():
        if isinstance(value, list):
            head = ", ".join(str(v) for v in value[:8])
            assert f" {key}=[{head}" in shown, (key, shown)
        elif isinstance(value, float):
            assert re.search(rf" {key}=(\S+)", shown) and float(
                re.search(rf" {key}=(\S+)", shown).group(1)
            ) == pytest.approx(value, rel=1e-5), (key, shown)
        else:
            assert f" {key}={value}" in shown, (key, shown)


FACE_RUN = r"""
import sys
import numpy as np
import opaque_ops as oo

it = oo.Interpreter(
    model_path=sys.argv[1],
    custom_ops=[oo.kernels.mp_l2t(), oo.kernels.bundle("transform_tensor_bilinear", "transform_landmarks")],
)
it.allocate_tensors()
it.set_tensor(it.get_input_details()[0]["index"], np.zeros((1, 192, 192, 3), np.float32))
try:
    it.invoke()
except oo.KernelError as exc:
    print("KERNEL", exc)
"""


def test_mediapipe_package_installs_and_runs_the_face_model_up_to_its_op(work):
    # The same path as for the never-seen ops, on MediaPipe's real model: the
    # package pip-installs, the model (with the bundled kernels for its two
    # other custom ops) allocates, and invoke stops at the scaffolded op with
    # the options of a node of the model in the message.
    from opaque_ops.model import read_model

    face = model_file("modules", "face_landmark", "face_landmark_with_attention.tflite")
    out = work / "mp_pkg"
    assert cli("scaffold", face, "-o", out, "--name", "mp_l2t", "--op", "Landmarks2TransformMatrix").returncode == 0
    site = work / "mp_site"
    pip("install", "-q", "--no-build-isolation", "--no-deps", "--target", site, out)
    r = run_python("-c", FACE_RUN, face, cwd=work, timeout=600, **child_env(site))
    assert r.returncode == 0, r.stdout + r.stderr
    message = next(line for line in r.stdout.splitlines() if line.startswith("KERNEL "))
    assert "Landmarks2TransformMatrix: not implemented yet (options:" in message, message
    nodes = [
        op for sg in read_model(face).subgraphs for op in sg.operators if op.op_name == "Landmarks2TransformMatrix"
    ]
    from opaque_ops.model import decode_flex_options

    first = decode_flex_options(nodes[0].custom_options)
    assert f"left_rotation_idx={first['left_rotation_idx']}" in message, message
    assert f"subset_idxs=[{', '.join(str(v) for v in first['subset_idxs'][:8])}" in message, message


# ------------------------------------------------------- an author's work --

SHRINK_INVOKE = r"""static TfLiteStatus ShrinkInvoke(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  const ShrinkData* d = (const ShrinkData*)TfLiteOpaqueNodeGetUserData(node);
  const TfLiteOpaqueTensor* in = TfLiteOpaqueNodeGetInput(context, node, 0);
  TfLiteOpaqueTensor* out = TfLiteOpaqueNodeGetOutput(context, node, 0);
  const float* x = (const float*)TfLiteOpaqueTensorData(in);
  float* y = (float*)TfLiteOpaqueTensorData(out);
  int64_t i, n = oo_num_elements(in);
  double scale = d->scales_n ? d->scales[0] : 1.0;
  int soft = strcmp(d->mode, "soft") == 0;
  for (i = 0; i < n; ++i) {
    double v = x[i], a = v < 0 ? -v : v, r;
    if (!d->enabled) r = v;
    else if (soft) r = a > d->lambda ? (v < 0 ? -(a - d->lambda) : a - d->lambda) * scale : 0.0;
    else r = a > d->lambda ? v * scale : 0.0;
    y[i] = (float)r;
  }
  return kTfLiteOk;
}
"""

SHRINK_REFERENCE = """def reference(inputs, options):
    (x,) = inputs
    if not options["enabled"]:
        return [x]
    scale = options["scales"][0]
    if options["mode"] == "soft":
        return [(np.sign(x) * np.maximum(np.abs(x) - options["lambda"], 0) * scale).astype(np.float32)]
    return [np.where(np.abs(x) > options["lambda"], x * scale, 0).astype(np.float32)]
"""


def write_op(project: Path, package: str, stem: str, prefix: str, invoke: str, reference: str) -> None:
    """What an author does: replace the generated {prefix}Invoke and reference() with ``invoke`` and ``reference``."""
    c_file = project / package / "c" / f"{stem}.c"
    text = c_file.read_text()
    begin = text.index(f"static TfLiteStatus {prefix}Invoke(")
    end = text.index("\n}\n", begin) + 3
    c_file.write_text(text[:begin] + invoke + text[end:])
    t_file = project / "tests" / f"test_{stem}.py"
    text = t_file.read_text()
    begin = text.index("def reference(")
    end = text.index("\ndef at_size", begin)
    t_file.write_text(text[:begin] + reference + "\n" + text[end:])


def test_an_author_writes_the_kernel_and_its_generated_test_passes(work, model):
    start = time.monotonic()
    out = work / "authored"
    r = cli("scaffold", model, "-o", out, "--name", "authored", "--op", "Shrink")
    assert r.returncode == 0, r.stderr
    write_op(out, "authored", "shrink", "Shrink", SHRINK_INVOKE, SHRINK_REFERENCE)
    t_file = out / "tests" / "test_shrink.py"
    r = run_pytest(out / "tests")
    assert r.returncode == 0 and summary(r).startswith("2 passed"), r.stdout + r.stderr
    print(f"scaffold to a passing test: {time.monotonic() - start:.1f} s")
    # A reference that disagrees makes the same test fail: it compares for real.
    t_file.write_text(t_file.read_text().replace('options["lambda"], 0) * scale', 'options["lambda"], 0) * 2'))
    r = run_pytest(out / "tests")
    assert r.returncode == 1 and "Mismatched elements" in r.stdout, r.stdout


# -------------------------------------------------------------- shapes --

# y = 2x written as the guide writes an elementwise kernel: by the input's
# size, trusting Prepare to have given the output as many elements.
DBL_INVOKE = r"""static TfLiteStatus DblInvoke(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  const TfLiteOpaqueTensor* in = TfLiteOpaqueNodeGetInput(context, node, 0);
  const float* x = TfLiteOpaqueTensorData(in);
  float* y = TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetOutput(context, node, 0));
  for (size_t i = 0; i < TfLiteOpaqueTensorByteSize(in) / sizeof(float); ++i) y[i] = 2 * x[i];
  return kTfLiteOk;
}
"""

DBL_REFERENCE = """def reference(inputs, options):
    return [2 * inputs[0]]
"""

RUN_RESIZED = r"""
import json, sys
import numpy as np
import opaque_ops as oo

model, shape, sources = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:]
it = oo.Interpreter(model_path=model, custom_ops=[oo.compile_ops(s) for s in sources])
it.resize_tensor_input(0, shape)
x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
out = {}
try:
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    y = it.get_tensor(it.get_output_details()[0]["index"])
    out["shape"] = list(y.shape)
    out["max_error"] = float(np.abs(y - 2 * x).max())  # against numpy: y = 2x
except oo.KernelError as exc:
    out["error"] = str(exc)
print("RESULT " + json.dumps(out))
"""


def scaffold_built(work: Path, b: ModelBuilder, inputs: list, outputs: list, name: str) -> tuple[Path, Path]:
    """The model of ``b`` with these inputs and outputs, written to WORK/NAME.tflite and
    scaffolded into WORK/NAME as package NAME: (model, project)."""
    b.set_inputs(inputs)
    b.set_outputs(outputs)
    model = work / f"{name}.tflite"
    model.write_bytes(b.build())
    r = cli("scaffold", model, "-o", work / name, "--name", name)
    assert r.returncode == 0, r.stderr
    return model, work / name


def dbl_model(path: Path, shape, signature) -> Path:
    b = ModelBuilder()
    x = b.add_tensor("x", shape, np.float32, shape_signature=signature)
    y = b.add_tensor("y", shape, np.float32, shape_signature=signature)
    b.add_custom_op("Dbl", [x], [y])
    b.set_inputs([x])
    b.set_outputs([y])
    path.write_bytes(b.build())
    return path


def test_a_dynamic_models_kernel_follows_a_resized_input(work):
    # A new user's report: Prepare set the output to the recorded [1, 3], so
    # at [1000, 3] the kernel above wrote 3000 floats into 3 ("double free or
    # corruption").  The output now takes the input's shape, and the
    # generated test runs the kernel at a resized shape too.
    model = dbl_model(work / "dyn.tflite", [1, 3], [-1, 3])
    out = work / "dyn_proj"
    assert cli("scaffold", model, "-o", out, "--name", "dyn_ops").returncode == 0
    c_text = (out / "dyn_ops" / "c" / "dbl.c").read_text()
    assert "static const int model[2] = {-1, 3};" in c_text and "oo_resize_like(context" in c_text
    write_op(out, "dyn_ops", "dbl", "Dbl", DBL_INVOKE, DBL_REFERENCE)
    r = run_pytest(out / "tests")
    assert r.returncode == 0 and summary(r).startswith("2 passed"), r.stdout + r.stderr
    assert "RESIZE_DIMS = [0]" in (out / "tests" / "test_dbl.py").read_text()
    r = run_python("-c", RUN_RESIZED, model, "[1000, 3]", out / "dyn_ops" / "c" / "dbl.c", timeout=600, **child_env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert result(r) == {"shape": [1000, 3], "max_error": 0.0}
    # Only the dims marked -1 may change: the fixed one is refused, not overrun.
    r = run_python("-c", RUN_RESIZED, model, "[4, 5]", out / "dyn_ops" / "c" / "dbl.c", timeout=600, **child_env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert (
        "Dbl: input 0 has shape [4, 5], the model records [-1, 3]: this kernel gives its outputs the shape of "
        "input 0 and takes other sizes only in the dims the model marks -1" in result(r)["error"]
    ), r.stdout


def test_a_static_models_kernel_refuses_a_resized_input(work):
    # `opaque-ops run --input x=file.npy` resizes the input to the file's
    # shape: the output stayed [2, 3] and the kernel wrote 21 floats into 6.
    model = dbl_model(work / "static.tflite", [2, 3], None)
    out = work / "static_proj"
    assert cli("scaffold", model, "-o", out, "--name", "static_ops").returncode == 0
    write_op(out, "static_ops", "dbl", "Dbl", DBL_INVOKE, DBL_REFERENCE)
    r = run_pytest(out / "tests")
    assert r.returncode == 0 and summary(r).startswith("1 passed"), r.stdout + r.stderr
    np.save(work / "seven.npy", np.ones((7, 3), np.float32))
    r = cli("run", model, "--ops", out / "static_ops" / "c" / "dbl.c", "--input", f"x={work / 'seven.npy'}")
    assert r.returncode == 1, r.stdout + r.stderr
    assert (
        "Dbl: input 0 has shape [7, 3], the model records [2, 3]: this kernel sets its outputs to the shapes "
        "the model records; derive them from the inputs in Prepare to take other shapes"
    ) in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    r = run_python("-c", RUN_RESIZED, model, "[2, 3]", out / "static_ops" / "c" / "dbl.c", timeout=600, **child_env())
    assert result(r) == {"shape": [2, 3], "max_error": 0.0}


def test_two_inputs_and_two_outputs_of_other_shapes_keep_the_recorded_shapes(work):
    # Outputs that do not all have the inputs' one shape cannot follow them
    # safely: every input must have the recorded shape, even where the
    # signature says -1.
    b = ModelBuilder()
    x = b.add_tensor("x", [1, 3], np.float32, shape_signature=[-1, 3])
    w = b.add_tensor("w", [4], np.int32, shape_signature=[-1])
    y = b.add_tensor("y", [1, 3], np.float32, shape_signature=[-1, 3])
    z = b.add_tensor("z", [2], np.int32)
    b.add_custom_op("Pair", [x, w], [y, z])
    _, out = scaffold_built(work, b, [x, w], [y, z], "pair_ops")
    c_text = (out / "pair_ops" / "c" / "pair.c").read_text()
    for line in [
        "static const int in0[2] = {1, 3};",
        "static const int in1[1] = {4};",
        "static const int out0[2] = {1, 3};",
        "static const int out1[1] = {2};",
        'oo_sc_check_input(context, node, 0, 2, in0, "[1, 3]", OO_SC_FIXED_HOW)',
        'oo_sc_check_input(context, node, 1, 1, in1, "[4]", OO_SC_FIXED_HOW)',
        "oo_resize(context, TfLiteOpaqueNodeGetOutput(context, node, 0), 2, out0)",
        "oo_resize(context, TfLiteOpaqueNodeGetOutput(context, node, 1), 1, out1)",
    ]:
        assert line in c_text, line
    assert "oo_resize_like" not in c_text.split("PairPrepare(")[1]
    assert "RESIZE_DIMS = []" in (out / "tests" / "test_pair.py").read_text()
    r = run_pytest(out / "tests")  # it compiles; the one case says what to write
    assert summary(r).startswith("1 failed") and "Pair is not written yet" in r.stdout, r.stdout + r.stderr


# ------------------------------------------------- constants, quantization --

# y = x * c requantized, reading what a quantized kernel reads: each tensor's
# scale and zero point, and that c is a constant of the model.
QSCALE_INVOKE = r"""static TfLiteStatus QScaleInvoke(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  const TfLiteOpaqueTensor* x = TfLiteOpaqueNodeGetInput(context, node, 0);
  const TfLiteOpaqueTensor* c = TfLiteOpaqueNodeGetInput(context, node, 1);
  TfLiteOpaqueTensor* y = TfLiteOpaqueNodeGetOutput(context, node, 0);
  TfLiteQuantizationParams qx = TfLiteOpaqueTensorGetQuantizationParams(x);
  TfLiteQuantizationParams qy = TfLiteOpaqueTensorGetQuantizationParams(y);
  const int8_t* xv = TfLiteOpaqueTensorData(x);
  const int32_t* cv = TfLiteOpaqueTensorData(c);
  int8_t* yv = TfLiteOpaqueTensorData(y);
  size_t i, n = TfLiteOpaqueTensorByteSize(x);
  if (TfLiteOpaqueTensorGetAllocationType(c) != kTfLiteMmapRo || qx.scale == 0 || qy.scale == 0) {
    TfLiteOpaqueContextReportError(context, "QScale: input 1 must be a constant and x, y quantized");
    return kTfLiteError;
  }
  for (i = 0; i < n; ++i) {
    double v = (xv[i] - qx.zero_point) * qx.scale * cv[i % 3] / qy.scale + qy.zero_point;
    long q = (long)(v < 0 ? v - 0.5 : v + 0.5);
    yv[i] = (int8_t)(q < -128 ? -128 : q > 127 ? 127 : q);
  }
  return kTfLiteOk;
}
"""

QSCALE_REFERENCE = """def reference(inputs, options, quantization):
    x, c = inputs
    qx, qy = quantization["inputs"][0], quantization["outputs"][0]
    real = (x.astype(np.float64) - qx["zero_point"]) * qx["scale"] * c
    return [np.clip(np.round(real / qy["scale"]) + qy["zero_point"], -128, 127).astype(np.int8)]
"""


def test_generated_cases_carry_the_models_constants_and_quantization(work):
    # A new user's report: an op whose input 1 is a constant [1, 2, 3] was
    # tested with a fed random input, and an int8 input of scale 0.5, zero
    # point 3 as a plain int8, so a kernel that checks either failed its
    # test while it ran right in the model.
    b = ModelBuilder()
    x = b.add_tensor("x", [2, 3], np.int8, quantization={"scale": [0.5], "zero_point": [3]})
    prev = x
    for k, (values, opts) in enumerate([([1, 2, 3], {"k": 1}), ([4, 5, 6], {"k": 2}), ([7, 8, 9], {"k": 2})]):
        c = b.add_constant(f"c{k}", np.array(values, np.int32))
        y = b.add_tensor(f"y{k}", [2, 3], np.int8, quantization={"scale": [0.25], "zero_point": [-1]})
        b.add_custom_op("QScale", [prev, c], [y], options=opts)
        prev = y
    model, out = scaffold_built(work, b, [x], [prev], "qscale_ops")
    text = (out / "tests" / "test_q_scale.py").read_text()
    # The first option set's one node: its constant's values; the second's two
    # nodes hold different values, so the case keeps the constness only.
    assert '"constants": {1: [1, 2, 3]},' in text and '"constants": {1: None},' in text
    assert "its nodes hold different values: random ones here" in text
    assert '"input_quantization": {0: {"scale": 0.5, "zero_point": 3}}' in text.replace("'", '"')
    assert '"output_quantization": {0: {"scale": 0.25, "zero_point": -1}}' in text.replace("'", '"')
    write_op(out, "qscale_ops", "q_scale", "QScale", QSCALE_INVOKE, QSCALE_REFERENCE)
    r = run_pytest(out / "tests")
    assert r.returncode == 0 and summary(r).startswith("2 passed"), r.stdout + r.stderr
    # The kernel runs as it did in its test in the model itself (numpy from the op's definition).
    code = (
        "import sys, numpy as np, opaque_ops as oo\n"
        "it = oo.Interpreter(model_path=sys.argv[1], custom_ops=[oo.compile_ops(sys.argv[2])])\n"
        "it.allocate_tensors()\n"
        "x = np.array([[3, 4, 5], [-2, 0, 7]], np.int8)\n"
        "it.set_tensor(it.get_input_details()[0]['index'], x)\n"
        "it.invoke()\n"
        "print('RESULT', it.get_tensor(it.get_output_details()[0]['index']).tolist())\n"
    )
    r = run_python("-c", code, model, out / "qscale_ops" / "c" / "q_scale.c", timeout=600, **child_env())
    expected = np.array([[3, 4, 5], [-2, 0, 7]], np.float64)
    for c, sx in (([1, 2, 3], 0.5), ([4, 5, 6], 0.25), ([7, 8, 9], 0.25)):
        zx = 3 if sx == 0.5 else -1
        expected = np.clip(np.round((expected - zx) * sx * np.array(c) / 0.25) - 1, -128, 127)
    assert result(r) == expected.astype(int).tolist(), r.stdout + r.stderr


def test_nodes_of_several_shapes(work):
    # RowSum is used at [2, 3] -> [2] and [4, 5] -> [4]: the inputs must
    # match one node's shapes, and the output gets that node's.  Neg is
    # used at [2, 3] and [4, 5], each node's output like its input: the
    # op follows its input in the dims the nodes disagree on.
    b = ModelBuilder()
    x1, x2 = b.add_tensor("x1", [2, 3], np.float32), b.add_tensor("x2", [4, 5], np.float32)
    n1, n2 = b.add_tensor("n1", [2, 3], np.float32), b.add_tensor("n2", [4, 5], np.float32)
    s1, s2 = b.add_tensor("s1", [2], np.float32), b.add_tensor("s2", [4], np.float32)
    b.add_custom_op("Neg", [x1], [n1])
    b.add_custom_op("Neg", [x2], [n2])
    b.add_custom_op("RowSum", [n1], [s1])
    b.add_custom_op("RowSum", [n2], [s2])
    model, out = scaffold_built(work, b, [x1, x2], [s1, s2], "several_ops")
    neg = (out / "several_ops" / "c" / "neg.c").read_text()
    assert "static const int model[2] = {-1, -1};" in neg and "oo_resize_like(context" in neg
    assert "RESIZE_DIMS = []" in (out / "tests" / "test_neg.py").read_text()  # no -1 in the model
    row_sum = (out / "several_ops" / "c" / "row_sum.c").read_text()
    for line in ["static const int s0_in0[2] = {2, 3};", "static const int s1_out0[1] = {4};", "} else if ("]:
        assert line in row_sum, line
    r = run_pytest(out / "tests")  # both compile: one case each says what to write
    assert summary(r).startswith("2 failed") and r.stdout.count("is not written yet") == 2, r.stdout + r.stderr
    # At a shape no node records, Prepare refuses it (before the unwritten Invoke).
    c_dir = out / "several_ops" / "c"
    r = run_python("-c", RUN_RESIZED, model, "[7, 3]", c_dir / "neg.c", c_dir / "row_sum.c", **child_env())
    assert (
        "RowSum: the inputs have shapes [7, 3]; the model's nodes record ([2, 3]) or ([4, 5]): this kernel sets "
        "its outputs to the shapes the model records"
    ) in result(r)["error"], r.stdout + r.stderr


# ------------------------------------------------------ omitted inputs --

# Mix(x, scale, bias) = x * scale + bias over the last dim, scale optional (1 where the node
# omits it, -1 in the model); Shift(x, _, bias) = x + bias, its input 1 omitted in every node.
# Both read bias at position 2, where the model has it, whether or not input 1 is there.
MIX_INVOKE = r"""static TfLiteStatus MixInvoke(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  const TfLiteOpaqueTensor* x = TfLiteOpaqueNodeGetInput(context, node, 0);
  const TfLiteOpaqueTensor* scale = TfLiteOpaqueNodeGetInput(context, node, 1); /* NULL: omitted */
  const TfLiteOpaqueTensor* bias = TfLiteOpaqueNodeGetInput(context, node, 2);
  const float* xv = TfLiteOpaqueTensorData(x);
  const float* sv = scale ? (const float*)TfLiteOpaqueTensorData(scale) : NULL;
  const float* bv = TfLiteOpaqueTensorData(bias);
  float* y = TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetOutput(context, node, 0));
  size_t i, n = TfLiteOpaqueTensorByteSize(x) / sizeof(float), k = TfLiteOpaqueTensorByteSize(bias) / sizeof(float);
  for (i = 0; i < n; ++i) y[i] = xv[i] * (sv ? sv[i] : 1.0f) + bv[i % k];
  return kTfLiteOk;
}
"""

MIX_REFERENCE = """def reference(inputs, options):
    x, scale, bias = inputs
    return [x * (1 if scale is None else scale) + bias]
"""

SHIFT_INVOKE = r"""static TfLiteStatus ShiftInvoke(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  const TfLiteOpaqueTensor* x = TfLiteOpaqueNodeGetInput(context, node, 0);
  const TfLiteOpaqueTensor* bias = TfLiteOpaqueNodeGetInput(context, node, 2);
  const float* xv = TfLiteOpaqueTensorData(x);
  const float* bv = TfLiteOpaqueTensorData(bias);
  float* y = TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetOutput(context, node, 0));
  size_t i, n = TfLiteOpaqueTensorByteSize(x) / sizeof(float), k = TfLiteOpaqueTensorByteSize(bias) / sizeof(float);
  for (i = 0; i < n; ++i) y[i] = xv[i] + bv[i % k];
  return kTfLiteOk;
}
"""

SHIFT_REFERENCE = """def reference(inputs, options):
    x, omitted, bias = inputs
    assert omitted is None
    return [x + bias]
"""

BIAS = [0.5, -1.0, 2.0]

RUN_MIX_MODEL = r"""
import json, sys
import numpy as np
import opaque_ops as oo
from opaque_ops.testing import run_op

model, mix, shift, bias = sys.argv[1:]
ops = [oo.compile_ops(mix), oo.compile_ops(shift)]
it = oo.Interpreter(model_path=model, custom_ops=ops)
it.allocate_tensors()
rng = np.random.default_rng(3)
x, s = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32)
details = it.get_input_details()
it.set_tensor(details[0]["index"], x)
it.set_tensor(details[1]["index"], s)
it.invoke()
y = it.get_tensor(it.get_output_details()[0]["index"])
bias = np.array(json.loads(bias), np.float32)
# numpy from the ops' definitions: Shift(Mix(Mix(x, -, bias), s, bias), -, bias)
expected = ((x * 1 + bias) * s + bias) + bias
out = {"max_error": float(np.abs(y - expected).max()), "shape": list(y.shape)}
# Shift's input 1 is omitted in every node: a tensor there is refused, not read as bias.
try:
    run_op(ops[1], "Shift", [x, s, bias], num_outputs=[([2, 3], np.float32)])
except oo.KernelError as exc:
    out["given"] = str(exc)
print("RESULT " + json.dumps(out))
"""


def test_omitted_inputs_keep_their_positions(work):
    # A user's report: a node with inputs [a, -1, b] was scaffolded as if it
    # had two ([a, b]): the kernel's Prepare then refused the very model it
    # came from ("needs 2 inputs, got 3"), and b's checks, constant and shape
    # were written for position 1.  Mix's first node omits input 1 and its
    # second gives it (so input 1 is optional: both are run); Shift omits
    # input 1 in its one node.
    b = ModelBuilder()
    x, s = b.add_tensor("x", [2, 3], np.float32), b.add_tensor("s", [2, 3], np.float32)
    bias = b.add_constant("bias", np.array(BIAS, np.float32))
    y1, y2, y3 = (b.add_tensor(n, [2, 3], np.float32) for n in ("y1", "y2", "y3"))
    b.add_custom_op("Mix", [x, -1, bias], [y1])
    b.add_custom_op("Mix", [y1, s, bias], [y2])
    b.add_custom_op("Shift", [y2, -1, bias], [y3])
    model, out = scaffold_built(work, b, [x, s], [y3], "omit_ops")
    mix = (out / "omit_ops" / "c" / "mix.c").read_text()
    shift = (out / "omit_ops" / "c" / "shift.c").read_text()
    for text in (mix, shift):
        assert "oo_check_io(context, OP_NAME, node, 3, 1)" in text
        assert "TfLiteOpaqueNodeGetInput returns NULL for it" in text
    assert " *   input 1: float32 [2, 3], omitted in 1 of 2 nodes: optional" in mix
    assert "input(s) 1: omitted in some of the model's nodes and given in" in mix
    # The two nodes' shapes: one set with input 1 omitted (NULL), one with it [2, 3]; bias at 2.
    assert "TfLiteOpaqueNodeGetInput(context, node, 1) == NULL" in mix and "static const int s1_in1[2] = {2, 3};" in mix
    assert "static const int s0_in2[1] = {3};" in mix
    assert " *   input 1: omitted in every node" in shift and "input 1 is given, and the model omits it" in shift
    assert 'oo_sc_check_input(context, node, 2, 1, in2, "[3]", OO_SC_FIXED_HOW)' in shift
    mix_test = (out / "tests" / "test_mix.py").read_text()
    # One case per omitted-input pattern, each with the constant at its real position.
    assert mix_test.count('"constants": {2: [0.5, -1.0, 2.0]},') == 2, mix_test
    assert "\"inputs\": [['float32', [2, 3]], None, ['float32', [3]]]," in mix_test
    assert "\"inputs\": [['float32', [2, 3]], ['float32', [2, 3]], ['float32', [3]]]," in mix_test
    r = run_pytest(out / "tests")  # both compile and take the model's nodes; each case says what to write
    assert summary(r).startswith("3 failed") and r.stdout.count("is not written yet") == 3, r.stdout + r.stderr
    write_op(out, "omit_ops", "mix", "Mix", MIX_INVOKE, MIX_REFERENCE)
    write_op(out, "omit_ops", "shift", "Shift", SHIFT_INVOKE, SHIFT_REFERENCE)
    r = run_pytest(out / "tests")
    assert r.returncode == 0 and summary(r).startswith("3 passed"), r.stdout + r.stderr
    c_dir = out / "omit_ops" / "c"
    r = run_python(
        "-c", RUN_MIX_MODEL, model, c_dir / "mix.c", c_dir / "shift.c", json.dumps(BIAS), timeout=600, **child_env()
    )
    got = result(r)
    assert got["shape"] == [2, 3] and got["max_error"] < 1e-5, got
    assert "Shift: input 1 is given, and the model omits it in every node" in got["given"], got


# Gate(x, g) = x * g elementwise, g optional (x where the node omits it).
GATE_INVOKE = r"""static TfLiteStatus GateInvoke(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  const TfLiteOpaqueTensor* x = TfLiteOpaqueNodeGetInput(context, node, 0);
  const TfLiteOpaqueTensor* g = TfLiteOpaqueNodeGetInput(context, node, 1); /* NULL: omitted */
  const float* xv = TfLiteOpaqueTensorData(x);
  const float* gv = g ? (const float*)TfLiteOpaqueTensorData(g) : NULL;
  float* y = TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetOutput(context, node, 0));
  size_t i, n = TfLiteOpaqueTensorByteSize(x) / sizeof(float);
  for (i = 0; i < n; ++i) y[i] = gv ? xv[i] * gv[i] : xv[i];
  return kTfLiteOk;
}
"""

GATE_REFERENCE = """def reference(inputs, options):
    x, g = inputs
    return [x if g is None else x * g]
"""


def test_an_optional_input_of_a_following_op_is_skipped_by_the_shape_rule(work):
    # Every tensor [1, 3] with dim 0 marked -1: the outputs follow input 0, and an
    # input that is there must have its shape; the omitted one has none to check.
    b = ModelBuilder()
    x, g, y1, y2 = (b.add_tensor(n, [1, 3], np.float32, shape_signature=[-1, 3]) for n in ("x", "g", "y1", "y2"))
    b.add_custom_op("Gate", [x, -1], [y1])
    b.add_custom_op("Gate", [y1, g], [y2])
    _, out = scaffold_built(work, b, [x, g], [y2], "gate_ops")
    gate = (out / "gate_ops" / "c" / "gate.c").read_text()
    assert "static const int model[2] = {-1, 3};" in gate and "oo_check_io(context, OP_NAME, node, 2, 1)" in gate
    assert "if (TfLiteOpaqueNodeGetInput(context, node, i) == NULL) continue;" in gate
    text = (out / "tests" / "test_gate.py").read_text()
    assert "RESIZE_DIMS = [0]" in text and "\"inputs\": [['float32', [1, 3]], None]," in text
    r = run_pytest(out / "tests")  # each omitted-input pattern, at the recorded and a resized size
    assert summary(r).startswith("4 failed") and r.stdout.count("is not written yet") == 4, r.stdout + r.stderr
    write_op(out, "gate_ops", "gate", "Gate", GATE_INVOKE, GATE_REFERENCE)
    r = run_pytest(out / "tests")
    assert r.returncode == 0 and summary(r).startswith("4 passed"), r.stdout + r.stderr


# ------------------------------------------------------ input counts --

# Mask(x, m) = x * m, or x where the node has no input 1: Mask's first node has 1 input, its
# second 2.  Affine(x, scale, bias) = x * scale + bias over the last dim, scale 1 where omitted
# (-1) and bias 0 where the node has only 2 inputs (left out entirely, not even as -1).  Both read
# a position that may be past the node's count with oo_sc_input, which checks the count first.
MASK_INVOKE = r"""static TfLiteStatus MaskInvoke(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  const TfLiteOpaqueTensor* x = TfLiteOpaqueNodeGetInput(context, node, 0);
  const TfLiteOpaqueTensor* m = oo_sc_input(context, node, 1); /* NULL: past the node's count */
  const float* xv = TfLiteOpaqueTensorData(x);
  const float* mv = m ? (const float*)TfLiteOpaqueTensorData(m) : NULL;
  float* y = TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetOutput(context, node, 0));
  size_t i, n = TfLiteOpaqueTensorByteSize(x) / sizeof(float);
  for (i = 0; i < n; ++i) y[i] = mv ? xv[i] * mv[i] : xv[i];
  return kTfLiteOk;
}
"""

MASK_REFERENCE = """def reference(inputs, options):
    x, m = (list(inputs) + [None])[:2]
    return [x if m is None else x * m]
"""

AFFINE_INVOKE = r"""static TfLiteStatus AffineInvoke(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  const TfLiteOpaqueTensor* x = TfLiteOpaqueNodeGetInput(context, node, 0);
  const TfLiteOpaqueTensor* scale = oo_sc_input(context, node, 1); /* NULL: omitted (-1) */
  const TfLiteOpaqueTensor* bias = oo_sc_input(context, node, 2);  /* NULL: past the node's count */
  const float* xv = TfLiteOpaqueTensorData(x);
  const float* sv = scale ? (const float*)TfLiteOpaqueTensorData(scale) : NULL;
  const float* bv = bias ? (const float*)TfLiteOpaqueTensorData(bias) : NULL;
  float* y = TfLiteOpaqueTensorData(TfLiteOpaqueNodeGetOutput(context, node, 0));
  size_t i, n = TfLiteOpaqueTensorByteSize(x) / sizeof(float);
  size_t k = bias ? TfLiteOpaqueTensorByteSize(bias) / sizeof(float) : 1;
  for (i = 0; i < n; ++i) y[i] = xv[i] * (sv ? sv[i] : 1.0f) + (bv ? bv[i % k] : 0.0f);
  return kTfLiteOk;
}
"""

AFFINE_REFERENCE = """def reference(inputs, options):
    x, scale, bias = (list(inputs) + [None, None])[:3]
    return [x * (1 if scale is None else scale) + (0 if bias is None else bias)]
"""

RUN_COUNTS_MODEL = r"""
import json, sys
import numpy as np
import opaque_ops as oo

model, mask, affine, bias = sys.argv[1:]
it = oo.Interpreter(model_path=model, custom_ops=[oo.compile_ops(mask), oo.compile_ops(affine)])
it.allocate_tensors()
rng = np.random.default_rng(5)
x, m, s = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(3))
for det, arr in zip(it.get_input_details(), (x, m, s)):
    it.set_tensor(det["index"], arr)
it.invoke()
y = it.get_tensor(it.get_output_details()[0]["index"])
bias = np.array(json.loads(bias), np.float32)
# numpy from the ops' definitions: Affine(Affine(Affine(Mask(Mask(x), m), s, bias), s), -, bias)
expected = ((x * m) * s + bias) * s + bias
print("RESULT " + json.dumps({"max_error": float(np.abs(y - expected).max()), "shape": list(y.shape)}))
"""


def test_nodes_of_one_op_with_different_input_counts(work):
    # A converter may leave a trailing optional input out entirely (the node
    # has fewer inputs) rather than write -1.  Scaffold cut the op's facts to
    # its first node's count, and the generated Prepare wanted that exact
    # count, so the kernel refused the model's other nodes ("needs 3 inputs
    # and 1 output, got 2 and 1").  Mask: nodes of 1 and 2 inputs, every
    # tensor [-1, 3] (the outputs follow input 0); Affine: nodes of 3, 2 and
    # 3 inputs (the last omits input 1), fixed shapes.
    b = ModelBuilder()
    x, m, y1, y2 = (b.add_tensor(n, [2, 3], np.float32, shape_signature=[-1, 3]) for n in ("x", "m", "y1", "y2"))
    s = b.add_tensor("s", [2, 3], np.float32)
    bias = b.add_constant("bias", np.array(BIAS, np.float32))
    y3, y4, y5 = (b.add_tensor(n, [2, 3], np.float32) for n in ("y3", "y4", "y5"))
    b.add_custom_op("Mask", [x], [y1])
    b.add_custom_op("Mask", [y1, m], [y2])
    b.add_custom_op("Affine", [y2, s, bias], [y3])
    b.add_custom_op("Affine", [y3, s], [y4])
    b.add_custom_op("Affine", [y4, -1, bias], [y5])
    model, out = scaffold_built(work, b, [x, m, s], [y5], "count_ops")
    c_dir = out / "count_ops" / "c"
    mask, affine = (c_dir / "mask.c").read_text(), (c_dir / "affine.c").read_text()
    assert "oo_sc_check_io_range(context, node, 1, 2, 1)" in mask
    assert "oo_sc_check_io_range(context, node, 2, 3, 1)" in affine
    assert "oo_check_io(context" not in mask + affine
    # The comment says which counts the model uses, and which positions may be past a node's count.
    assert " * Input counts: the model's nodes have 1 (in 1 node), 2 (in 1 node) inputs:" in mask
    assert " * Input counts: the model's nodes have 2 (in 1 node), 3 (in 2 nodes) inputs:" in affine
    assert " *   input 2: float32 [3], absent in 1 of 3 nodes (0 omitted, 1 with fewer inputs): optional" in affine
    assert " *   input 1: float32 [2, 3], omitted in 1 of 3 nodes: optional" in affine
    # Input 2 is read only below the node's count; a set of shapes matches only its own count.
    assert "const TfLiteOpaqueTensor* t = oo_sc_input(context, node, 2);" in affine
    assert "TfLiteOpaqueNodeNumberOfInputs(node) == 2 &&" in affine
    assert "for (i = 0; i < TfLiteOpaqueNodeNumberOfInputs(node); ++i) {" in mask
    affine_test = (out / "tests" / "test_affine.py").read_text()
    # One case per count pattern: the node of 2 inputs runs with 2.
    assert "\"inputs\": [['float32', [2, 3]], ['float32', [2, 3]]]," in affine_test
    assert "# The node has 2 input(s), others up to 3: input(s) 2 left out entirely" in affine_test
    assert "\"inputs\": [['float32', [2, 3]], None, ['float32', [3]]]," in affine_test
    assert "\"inputs\": [['float32', [2, 3]]]," in (out / "tests" / "test_mask.py").read_text()
    # Mask: 2 patterns, each also resized; Affine: 3.  Prepare takes every one ("not written yet").
    r = run_pytest(out / "tests")
    assert summary(r).startswith("7 failed") and r.stdout.count("is not written yet") == 7, r.stdout + r.stderr
    write_op(out, "count_ops", "mask", "Mask", MASK_INVOKE, MASK_REFERENCE)
    write_op(out, "count_ops", "affine", "Affine", AFFINE_INVOKE, AFFINE_REFERENCE)
    r = run_pytest(out / "tests")
    assert r.returncode == 0 and summary(r).startswith("7 passed"), r.stdout + r.stderr
    r = run_python(
        "-c",
        RUN_COUNTS_MODEL,
        model,
        c_dir / "mask.c",
        c_dir / "affine.c",
        json.dumps(BIAS),
        timeout=600,
        **child_env(),
    )
    got = result(r)
    assert got["shape"] == [2, 3] and got["max_error"] < 1e-5, got


def test_nodes_of_one_op_with_different_output_counts_are_refused(work):
    # No output is "omitted" for a kernel to test, and an output count is the
    # op's structure: scaffold says so rather than write a kernel that refuses
    # some of the model's nodes; the model's other ops still scaffold with --op.
    b = ModelBuilder()
    x, a, c, d = (b.add_tensor(n, [2], np.float32) for n in ("x", "a", "c", "d"))
    b.add_custom_op("Fork", [x], [a])
    b.add_custom_op("Fork", [a], [c, d])
    b.add_custom_op("Other", [c], [d])
    b.set_inputs([x])
    b.set_outputs([d])
    model = work / "fork.tflite"
    model.write_bytes(b.build())
    r = cli("scaffold", model, "-o", work / "fork", "--name", "fork_ops")
    assert r.returncode != 0 and not (work / "fork").exists(), r.stdout + r.stderr
    assert "the nodes of custom op 'Fork' have different output counts (1 and 2)" in r.stderr, r.stderr
    assert "scaffold the model's other ops with --op" in r.stderr, r.stderr
    r = cli("scaffold", model, "-o", work / "fork", "--name", "fork_ops", "--op", "Other")
    assert r.returncode == 0 and (work / "fork" / "fork_ops" / "c" / "other.c").exists(), r.stderr


# QShift(x, _, b) = x + b in real values, int8 in and out: input 1 omitted, and the quantized
# input b after it.  Each tensor has its own scale and zero point, so one at the wrong position
# (or missing) gives other numbers.
QSHIFT_INVOKE = r"""static TfLiteStatus QShiftInvoke(TfLiteOpaqueContext* context, TfLiteOpaqueNode* node) {
  const TfLiteOpaqueTensor* x = TfLiteOpaqueNodeGetInput(context, node, 0);
  const TfLiteOpaqueTensor* b = TfLiteOpaqueNodeGetInput(context, node, 2);
  TfLiteOpaqueTensor* yt = TfLiteOpaqueNodeGetOutput(context, node, 0);
  TfLiteQuantizationParams qx = TfLiteOpaqueTensorGetQuantizationParams(x);
  TfLiteQuantizationParams qb = TfLiteOpaqueTensorGetQuantizationParams(b);
  TfLiteQuantizationParams qy = TfLiteOpaqueTensorGetQuantizationParams(yt);
  const int8_t* xv = TfLiteOpaqueTensorData(x);
  const int8_t* bv = TfLiteOpaqueTensorData(b);
  int8_t* y = TfLiteOpaqueTensorData(yt);
  size_t i, n = TfLiteOpaqueTensorByteSize(x);
  if (qx.scale <= 0 || qb.scale <= 0 || qy.scale <= 0) {
    TfLiteOpaqueContextReportError(context, "QShift: every tensor must be quantized");
    return kTfLiteError;
  }
  for (i = 0; i < n; ++i) {
    double real = (xv[i] - qx.zero_point) * (double)qx.scale + (bv[i] - qb.zero_point) * (double)qb.scale;
    double q = floor(real / qy.scale + 0.5) + qy.zero_point;
    y[i] = (int8_t)(q < -128 ? -128 : q > 127 ? 127 : q);
  }
  return kTfLiteOk;
}
"""

QSHIFT_REFERENCE = """def reference(inputs, options, quantization):
    x, omitted, b = inputs
    assert omitted is None
    qx, qb, qy = quantization["inputs"][0], quantization["inputs"][2], quantization["outputs"][0]
    real = (x.astype(np.float64) - qx["zero_point"]) * qx["scale"] + (b.astype(np.float64) - qb["zero_point"]) * qb["scale"]
    return [np.clip(np.floor(real / qy["scale"] + 0.5) + qy["zero_point"], -128, 127).astype(np.int8)]
"""


def test_a_quantized_input_after_an_omitted_one_keeps_its_position(work):
    # The quantization of input 2 must land at position 2 of the generated case,
    # not at 1 (where it would be had the omitted input been dropped).
    b = ModelBuilder()
    x = b.add_tensor("x", [2, 3], np.int8, quantization={"scale": [0.5], "zero_point": [3]})
    bb = b.add_tensor("b", [2, 3], np.int8, quantization={"scale": [0.25], "zero_point": [-2]})
    y = b.add_tensor("y", [2, 3], np.int8, quantization={"scale": [0.125], "zero_point": [1]})
    b.add_custom_op("QShift", [x, -1, bb], [y])
    _, out = scaffold_built(work, b, [x, bb], [y], "qshift_ops")
    text = (out / "tests" / "test_q_shift.py").read_text().replace("'", '"')
    assert '"input_quantization": {0: {"scale": 0.5, "zero_point": 3}, 2: {"scale": 0.25, "zero_point": -2}}' in text, (
        text
    )
    assert '"inputs": [["int8", [2, 3]], None, ["int8", [2, 3]]],' in text
    r = run_pytest(out / "tests")
    assert summary(r).startswith("1 failed") and "is not written yet" in r.stdout, r.stdout + r.stderr
    c_file = out / "qshift_ops" / "c" / "q_shift.c"
    c_file.write_text(c_file.read_text().replace("#include <string.h>", "#include <string.h>\n#include <math.h>", 1))
    write_op(out, "qshift_ops", "q_shift", "QShift", QSHIFT_INVOKE, QSHIFT_REFERENCE)
    r = run_pytest(out / "tests")
    assert r.returncode == 0 and summary(r).startswith("1 passed"), r.stdout + r.stderr
