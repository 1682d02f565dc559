"""Compiling C: the one build path, its verified cache, and the bundled kernels' files.

- :mod:`.compiler` -- the build path (cffi in a child process) and the compile cache;
- :mod:`.child` -- the compile step itself, run as a script in that child;
- :mod:`.store` -- the private, digest-checked directories opaque_ops writes;
- :mod:`.paths` -- where the C headers, runtime glue and bundled kernels are;
- :mod:`.bundles` -- the bundled kernel files, bundle names and prebuilt copies;
- :mod:`.standalone` -- standalone and cross-built libraries (``build.py``, ``opaque-ops build``);
- :mod:`.cpu` -- what CPU a number came from.
"""
