"""openWakeWord 0.6.0 (imports ``tflite_runtime.interpreter``) scoring espeak-ng speech, frame by frame.

Models: openWakeWord's feature models and wake-word classifiers as shipped in
the pyopen-wakeword wheel (openwakeword itself downloads them at run time).
The audio is the session made by ``run_clients.py``: wake phrases and other
speech.  Per 80 ms frame, ``Model.predict`` returns one score per model.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
from _common import Timer, interpreter_kind, parse_args, read_wav, reference_aliases, save

args = parse_args()
if args.runtime == "litert":
    reference_aliases(tflite_runtime=True)

import openwakeword  # noqa: E402  (after the reference aliases)

models_dir = os.path.join(list(importlib.util.find_spec("pyopen_wakeword").submodule_search_locations)[0], "models")
wake_models = [
    os.path.join(models_dir, f"{n}.tflite") for n in ("hey_jarvis", "alexa", "hey_mycroft", "okay_nabu", "hey_rhasspy")
]
# AudioFeatures fills its first feature window with np.random noise: seed it,
# so both runs start from the same state.
np.random.seed(0)
model = openwakeword.Model(
    wakeword_models=wake_models,
    melspec_model_path=os.path.join(models_dir, "melspectrogram.tflite"),
    embedding_model_path=os.path.join(models_dir, "embedding_model.tflite"),
)
names = list(model.models)
audio = read_wav(os.path.join(args.inputs, "speech.wav"))
frame = 1280
timer = Timer()
scores, newest = [], []
for start in range(0, len(audio) - frame + 1, frame):
    with timer:
        pred = model.predict(audio[start : start + frame])
    scores.append([pred[n] for n in names])
    # The embedding this frame added (the buffers below keep only the last 10 s).
    newest.append(model.preprocessor.feature_buffer[-1].copy())
scores = np.asarray(scores, dtype=np.float64)

save(
    args.out,
    {
        "scores": scores,
        "embedding_per_frame": np.asarray(newest),
        "melspec_features": model.preprocessor.melspectrogram_buffer,
        "embeddings": model.preprocessor.feature_buffer,
    },
    interpreter=interpreter_kind(model.models[names[0]]),
    timer=timer,
    info={
        "models": names,
        "frames": len(scores),
        "max_score": {n: float(scores[:, i].max()) for i, n in enumerate(names)},
        "frames_over_0.5": {n: int((scores[:, i] > 0.5).sum()) for i, n in enumerate(names)},
    },
)
