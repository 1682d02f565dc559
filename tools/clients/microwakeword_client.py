"""ovos-ww-plugin-microwakeword 0.0.3a1 (imports ``ai_edge_litert.interpreter``) on espeak-ng speech.

Models: microWakeWord's streaming models as shipped in the pymicro-wakeword
wheel, each with the cutoff and window of its JSON manifest.  Two uses of the
package, as OVOS makes them:

- the plugin (``MicroWakeWordPlugin``) fed 50 ms chunks through ``update()``
  and polled with ``found_wake_word()``: the chunk indices where it fired;
- its inference engine (``MicroWakeWordEngine.process_audio``): the
  probability of every inference step.
"""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
from _common import Timer, interpreter_kind, parse_args, read_wav, save

args = parse_args()
# The reference needs no alias: the package imports ai_edge_litert itself.

from ovos_ww_plugin_microwakeword import MicroWakeWordPlugin  # noqa: E402
from ovos_ww_plugin_microwakeword.inference import MicroWakeWordEngine  # noqa: E402

models_dir = os.path.join(list(importlib.util.find_spec("pymicro_wakeword").submodule_search_locations)[0], "models")
audio = read_wav(os.path.join(args.inputs, "speech.wav")).tobytes()
chunk = 800 * 2  # 50 ms of 16 kHz int16, OVOS' chunk size
arrays, info, kind = {}, {}, None
timer = Timer()
for name in ("hey_jarvis", "alexa", "hey_mycroft", "okay_nabu"):
    path = os.path.join(models_dir, f"{name}.tflite")
    manifest = json.load(open(os.path.join(models_dir, f"{name}.json")))
    micro = manifest.get("micro", manifest)
    config = {
        "model": path,
        "probability_cutoff": micro.get("probability_cutoff", 0.5),
        "sliding_window_size": micro.get("sliding_window_size", 10),
    }
    plugin = MicroWakeWordPlugin(key_phrase=name.replace("_", " "), config=config)
    kind = interpreter_kind(plugin._engine._interp)
    fired = []
    for i in range(0, len(audio), chunk):
        with timer:
            plugin.update(audio[i : i + chunk])
        if plugin.found_wake_word():
            fired.append(i // chunk)
    engine = MicroWakeWordEngine(path)
    probs = np.asarray(engine.process_audio(audio), dtype=np.float64)
    arrays[f"{name}/fired_chunks"] = np.asarray(fired, dtype=np.int64)
    arrays[f"{name}/probabilities"] = probs
    info[name] = {"fired_at_s": [round(c * 0.05, 2) for c in fired], "max_probability": float(probs.max())}

save(args.out, arrays, interpreter=kind, timer=timer, info=info)
