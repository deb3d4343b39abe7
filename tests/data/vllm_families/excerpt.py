"""Make the excerpts in this folder from the H200 family traces (benchmarks/h200/vllm_families.py CASE output):
every event but the Python frames other than nn.Module ones (63k of 77k events, unread by mmprof), machine paths
rewritten, xz-compressed. Usage: python excerpt.py CASE_DIR OUT.json.xz"""
import gzip
import json
import lzma
import re
import sys

src, dst = sys.argv[1], sys.argv[2]
d = json.load(gzip.open(src + "/trace.pt.trace.json.gz"))
d["traceEvents"] = [e for e in d["traceEvents"]
                    if e.get("cat") != "python_function" or str(e.get("name", "")).startswith("nn.Module")]
s = json.dumps(d, separators=(",", ":"))
s = re.sub(r"/(?:work/main|tmp/vsite|tmp/vkit|tmp)/", "", s)
with open(dst, "wb") as f:
    f.write(lzma.compress(s.encode(), preset=9 | lzma.PRESET_EXTREME))
