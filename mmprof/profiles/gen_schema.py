"""Regenerate profile.schema.json from schema.py: `python -m mmprof.profiles.gen_schema`."""

from pathlib import Path

import orjson

from mmprof.profiles.schema import json_schema

if __name__ == "__main__":
    out = Path(__file__).with_name("profile.schema.json")
    out.write_bytes(orjson.dumps(json_schema(), option=orjson.OPT_INDENT_2) + b"\n")
    print(f"wrote {out}")
