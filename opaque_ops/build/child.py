"""The compile step of :func:`opaque_ops.build.compiler.build`, run in a child process.

Never imported by the package: ``_cbuild`` runs this file with the same
Python, in a private working directory, with its stdout and stderr on a pipe.
Compiling in a child keeps everything that compiling does to a process away
from the caller: setuptools changes the working directory, the compiler
subprocesses inherit fds 1 and 2, and distutils rewrites ``os.environ``.

cffi drives the compiler: its platform layer (``cffi.ffiplatform``, the code
under ``FFI.compile``) runs setuptools' ``build_ext`` with each source as its
own translation unit.  The result is a plain shared object, not a Python
extension: the sources include no Python header and no module init function.

Input: a JSON object on stdin (see ``_cbuild.build``).  Output: the library at
``spec["output"]`` and ``result.json`` in the working directory.
"""

import json
import os
import sys


def _python_flags_off(cc):
    """Build with our compiler and flags only, whatever Python itself was built with.

    build_ext starts every command from the interpreter's own configuration
    (``sysconfig``): ``-O3 -g -DNDEBUG -fwrapv``, an rpath to Python's lib
    directory, and on some distributions ``-march=...``, which a cross
    compiler rejects.  A kernel library is not a Python extension and must
    not depend on how Python was built, so once build_ext has configured its
    compiler object, its commands are replaced with the bare compiler (in this
    child only); the flags come from the extension (``_cbuild.BuildSpec``).
    ``set_executables`` is the compiler object's public interface for this,
    in every distutils and setuptools version.
    """
    try:
        import setuptools  # noqa: F401  (cffi uses setuptools' distutils when it exists)
    except ImportError:
        pass
    from distutils.command.build_ext import build_ext

    configured = build_ext.build_extensions

    def build_extensions(self):
        self.compiler.set_executables(
            preprocessor=cc + ["-E"],
            compiler=list(cc),
            compiler_so=list(cc),
            linker_so=cc + ["-shared"],
            linker_exe=list(cc),
        )
        configured(self)

    build_ext.build_extensions = build_extensions
    # Environment the compiler object might still read (a user's CFLAGS must
    # not change a cached library without changing its key).
    for name in ("CC", "CXX", "LDSHARED", "CFLAGS", "CPPFLAGS", "LDFLAGS", "CPP", "AR", "ARFLAGS"):
        os.environ.pop(name, None)


def main():
    spec = json.load(sys.stdin)
    result = {"ok": False, "error": ""}
    try:
        _python_flags_off(spec["cc"])
        from cffi import ffiplatform
        from cffi.error import VerificationError

        sources = spec["sources"]
        ext = ffiplatform.get_extension(
            sources[0],
            "oo_kernel_library",
            sources=sources[1:],
            include_dirs=spec["include_dirs"],
            define_macros=[tuple(m) for m in spec["define_macros"]],
            extra_compile_args=spec["extra_compile_args"],
            extra_link_args=spec["extra_link_args"],
            libraries=spec["libraries"],
        )
        try:
            built = ffiplatform.compile(os.getcwd(), ext, compiler_verbose=int(spec["verbose"]))
        except VerificationError as exc:
            result["error"] = str(exc)
        else:
            os.replace(built, spec["output"])
            result["ok"] = True
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises CompileError
        result["error"] = f"{type(exc).__name__}: {exc}"
    sys.stdout.flush()
    with open("result.json", "w") as f:
        json.dump(result, f)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
