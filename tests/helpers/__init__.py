"""Helpers shared by the tests, one module per subject.

Tests import them as ``from tests.helpers.atan import ATAN_INPUT``; child
processes started by :mod:`tests.helpers.child_process` and isolated workers
import them the same way (the repository root leads their ``sys.path``).

=====================  ===============================================================
``aarch64_python``     an emulated aarch64 CPython (qemu-user) with no compiler: Pi OS bookworm's and trixie's
``add_delegate_plugin.c``  a TFLite delegate plugin in C (claims float32 ADD)
``armhf_python``       an emulated armhf CPython (qemu-arm)
``atan``               the Atan seed model (examples/atan), its reference and C source
``child_process``      the one runner of Python child processes, and ``crashed()``
``concurrent_start``   a new process's first interpreters created on threads at once (its child program)
``corpus``             tests/corpus: former crashers and the messages they must get
``delegate_plugin``    builds ``add_delegate_plugin.c`` for a test
``fork_locks``         a fork while another thread holds one of opaque_ops' locks (its child program)
``hostile_options``    random option bytes for kernels, checked in a child process
``isolate_lifecycle_ops`` a python_op that spins, sleeps or exits on command (isolation lifecycle tests)
``isolate_python_ops`` module-level python_ops that an isolated worker imports
``locations``          the checkout's paths, installed packages' files, example modules
``misbehaving_kernels`` C kernels that crash, hang or exit on purpose, and their models
``other_python``       another CPython of the host (pyenv's 3.13), for a wheel's fast calls built for it
``pickled_ops``        functions pickled by reference into pool workers
``reference_models``   small models checked against ai-edge-litert (model tests)
``runtime_libraries``  the TFLite C libraries: the installed wheel's and other architectures'
``simd_cases``         the cases every SIMD clone of the kernels must agree on
``slow_model``         a model that keeps one thread busy in C (cancellation tests)
``sparse_model``       a model with a sparse (CSR) constant
``synthetic_images``   a synthetic person for the selfie segmentation models
``transpose_conv``     Convolution2DTransposeBias: numpy reference, models, counting build
``worker_resources``   what an isolated worker may leak: processes, shm, mappings, fds
=====================  ===============================================================
"""
