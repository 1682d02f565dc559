"""The isolated worker's memory cap: ``RLIMIT_DATA`` above its baseline, minus its shared segments."""

from __future__ import annotations


def _vm_data() -> int:
    """This process's private writable memory (VmData), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    return 0  # pragma: no cover


class Budget:
    """The memory cap: ``RLIMIT_DATA`` above the worker's baseline, minus the shared segments.

    Shared (memfd) mappings are not counted by ``RLIMIT_DATA``, so every
    segment the worker creates is charged here and the limit is lowered by
    as much: the model's heap plus its shared tensors stay under the cap.
    """

    def __init__(self):
        self.limit = None
        self.base = 0
        self.shared = 0

    def set(self, limit: int | None) -> None:
        import resource

        self.limit = limit
        if limit is None:
            return
        self.base = _vm_data()
        self._apply(resource)

    def _apply(self, resource) -> None:
        value = max(self.base + self.limit - self.shared, 0)
        resource.setrlimit(resource.RLIMIT_DATA, (value, value))

    def charge(self, nbytes: int) -> None:
        if self.limit is None:
            return
        if self.shared + nbytes > self.limit:
            raise MemoryError(
                f"shared tensor memory of {self.shared + nbytes} bytes would exceed the isolated "
                f"worker's memory_limit of {self.limit} bytes"
            )
        import resource

        self.shared += nbytes
        self._apply(resource)
