"""MediaPipe's own runtime as a benchmark peer: runs inside a venv with mediapipe==0.10.14.

Started by bench_selfie.MediaPipePeer in that venv's Python (never imported by
opaque_ops or its tests; MediaPipe 0.10.14 needs numpy<2, so it cannot share
the main environment).  It drives MediaPipe's selfie segmentation solution,
``mediapipe.solutions.selfie_segmentation.SelfieSegmentation``, whose CPU
graph runs exactly the model file ``mediapipe/modules/selfie_segmentation/
selfie_segmentation.tflite`` (model_selection=0) with MediaPipe's TFLite
build, its op resolver and its XNNPACK delegate, plus MediaPipe's own pre-
and post-processing (image to tensor, tensor to mask).

Protocol, one line per request on stdin, one line of JSON per answer on stdout:

    image PATH        load an HxWx3 uint8 RGB image from a .npy file
    run N             process the image N times; answer {"seconds": total}
    mask PATH         save the last mask (float32 HxW) to a .npy file
    quit
"""

from __future__ import annotations

import json
import sys
import time


def main() -> int:
    import mediapipe as mp
    import numpy as np

    seg = mp.solutions.selfie_segmentation.SelfieSegmentation(model_selection=0)
    image = None
    result = None
    print(json.dumps({"ready": True, "mediapipe": mp.__version__, "numpy": np.__version__}), flush=True)
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "image":
            image = np.ascontiguousarray(np.load(arg))
            result = seg.process(image)
            answer = {"ok": True}
        elif cmd == "run":
            t0 = time.perf_counter()
            for _ in range(int(arg)):
                result = seg.process(image)
            answer = {"seconds": time.perf_counter() - t0}
        elif cmd == "mask":
            np.save(arg, np.asarray(result.segmentation_mask, np.float32))
            answer = {"ok": True}
        elif cmd == "quit":
            break
        else:
            answer = {"error": f"unknown command {cmd!r}"}
        print(json.dumps(answer), flush=True)
    seg.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
