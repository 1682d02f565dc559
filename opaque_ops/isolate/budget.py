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
        # Only the soft limit follows the shared segments: the hard one stays
        # at the whole memory_limit, so that the soft one can go back up when
        # a segment is released (an unprivileged process never raises its
        # hard limit).  Lowered with it, every grown tensor's old buffer
        # stayed charged for good: a series of growing resizes was refused,
        # or on 2.17 crashed in the arena's unchecked growth, well within
        # the limit.
        hard = self.base + self.limit
        value = max(hard - self.shared, 0)
        resource.setrlimit(resource.RLIMIT_DATA, (value, hard))

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

    def release(self, nbytes: int) -> None:
        """Give back the charge of a segment the worker no longer uses (see Placement._release)."""
        if self.limit is None or nbytes <= 0:
            return
        import resource

        self.shared = max(self.shared - nbytes, 0)
        self._apply(resource)
