"""The command line shared by the documents generated from observed runs (docs/wrappers.md,
docs/vendors.md): summarize a directory of reports into a committed summary JSON, and write
the document's generated section from a summary."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from amp_conformance.core import generated
from amp_conformance.tools.matrix import read_json


@dataclass(frozen=True)
class Table:
    """One generated document: how to summarize its reports and render the summary."""

    prog: str
    description: str
    #: the reports directory and the nox session that fills it, for --help and errors
    reports: str
    session: str
    #: a file of a reports directory that marks a run (``*.json``, ``*.meta.json``)
    marker: str
    summarize: Callable[[Path], dict]
    markdown: Callable[[dict], str]
    begin: str
    end: str
    #: (the committed summary, the one just made) -> the one to write: what keeps the rows of
    #: runs the reports directory does not hold (one backend's session run alone)
    merge: Callable[[dict, dict], dict] | None = None

    def write(self, doc: Path, summary: dict) -> bool:
        return generated.write(doc, self.begin, self.end, self.markdown(summary))

    def main(self, argv: list[str] | None = None) -> int:
        parser = argparse.ArgumentParser(prog=self.prog, description=self.description)
        parser.add_argument("--reports", type=Path, help=f"a directory of reports "
                            f"({self.reports}): summarize it (into --summary when given)")
        parser.add_argument("--summary", type=Path, help="the summary JSON: read it (without "
                            "--reports) or write it (with --reports)")
        parser.add_argument("--write", metavar="DOC", type=Path, help="replace the generated "
                            "section of DOC instead of printing it")
        args = parser.parse_args(argv)
        if args.reports:
            if not args.reports.is_dir() or not any(args.reports.glob(self.marker)):
                print(f"error: no reports under {args.reports} (run {self.session} first)",
                      file=sys.stderr)
                return 2
            summary = self.summarize(args.reports)
            if args.summary and self.merge is not None and args.summary.exists():
                summary = self.merge(read_json(args.summary), summary)
            if args.summary:
                args.summary.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
        elif args.summary:
            summary = read_json(args.summary)
            if not summary:
                print(f"error: {args.summary} is not a summary", file=sys.stderr)
                return 2
        else:
            parser.error("give --reports or --summary")
        if args.write:
            print(f"{args.write}: {'updated' if self.write(args.write, summary) else 'up to date'}")
        else:
            sys.stdout.write(self.markdown(summary))
        return 0
