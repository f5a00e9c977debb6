"""Loading the golden captures under tests/data (format files, raw pages, the kernel's text)."""

from __future__ import annotations

import glob
import json
import os
from typing import Dict, List, Tuple

from npu_trace.ftrace.format import EventFormat, PageHeader, parse_format, parse_header_page

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def kernel_dirs() -> List[str]:
    return sorted(d for d in glob.glob(os.path.join(DATA, "kernel-*")) if os.path.isdir(d))


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def load_formats(root: str) -> Tuple[PageHeader, List[EventFormat]]:
    header = parse_header_page(read(os.path.join(root, "header_page")))
    formats = []
    for path in sorted(glob.glob(os.path.join(root, "events", "*", "*", "format"))):
        system = os.path.basename(os.path.dirname(os.path.dirname(path)))
        formats.append(parse_format(read(path), system))
    return header, formats


def load_pages(root: str) -> List[Tuple[int, bytes]]:
    with open(os.path.join(root, "pages.json")) as f:
        index = json.load(f)["pages"]
    with open(os.path.join(root, "pages.bin"), "rb") as f:
        blob = f.read()
    return [(cpu, blob[off : off + length]) for cpu, off, length in index]


def by_name(formats: List[EventFormat]) -> Dict[str, EventFormat]:
    return {f.full_name: f for f in formats}
