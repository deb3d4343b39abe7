"""The reference M3 runtime (mmprof.runtime, tiny preset), one process on the CPU: prefill 16 tokens and
4 decode steps. Its regions nest as mmprof.prefill > mmprof.step.0 and mmprof.decode > mmprof.step.N, so a
capture can only be switched (light mode) once the outer phase range has closed."""
from mmprof.runtime import Switches, Workload, build_model, generate, get_preset

model = build_model(get_preset("tiny"), Switches())
res = generate(model, Workload(batch=1, prompt_len=16, decode_steps=4))
print("runtime ok", flush=True)
