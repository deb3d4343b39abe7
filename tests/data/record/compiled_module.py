"""A plain torch.compile(fullgraph=True) program (no profiling code): vLLM compiles its models this way.

Dynamo traces the global module hooks that `mmprof record` installs; before the fix their profiler query made
fullgraph capture fail with "torch.* op returned non-Tensor" (seen with vLLM 0.26 on Qwen2-MoE, H200)."""
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)

    def forward(self, x):
        return x + self.down(torch.nn.functional.silu(self.up(x)))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(Block() for _ in range(2))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


torch.manual_seed(0)
net = torch.compile(Net(), fullgraph=True, backend="eager")
x = torch.randn(4, 16)
with torch.no_grad():
    for i in range(3):
        with torch.profiler.record_function(f"mmprof.step.{i}"):
            y = net(x)
print("ok", tuple(y.shape))
