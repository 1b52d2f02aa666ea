#!/usr/bin/env python3
"""Open a `kvtier plan --report` page in headless Chromium and check that it
loads and its charts render.

The page sets document.title to 'charts-ok' once every chart <img> has
loaded and decoded (naturalWidth > 0), 'charts-failed' if one failed.  We
dump the DOM after the page settles and read the title, and take a
screenshot that must be a non-trivial PNG.

usage: plan_browser.py REPORT_DIR [CHART.svg ...]   exit 0 pass, 1 fail, 77 skip
(no chromium); the charts named must be in the rendered page besides
hitrate.svg and ttft.svg
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def main():
    report = os.path.abspath(sys.argv[1])
    index = os.path.join(report, "index.html")
    browser = find_chromium()
    if not browser:
        print("skip: chromium absent (apt-get install chromium)")
        return 77
    if not os.path.isfile(index):
        print(f"FAIL {index} absent")
        return 1
    url = "file://" + index
    with tempfile.TemporaryDirectory() as profile:
        common = [browser, "--headless", "--no-sandbox", "--disable-gpu",
                  "--disable-background-networking", "--no-first-run",
                  "--disable-dev-shm-usage", f"--user-data-dir={profile}",
                  "--virtual-time-budget=5000"]
        try:
            dom = subprocess.run(common + ["--dump-dom", url], capture_output=True,
                                 text=True, timeout=120)
        except subprocess.TimeoutExpired:
            print("FAIL chromium --dump-dom timed out")
            return 1
        if dom.returncode != 0:
            print(f"FAIL chromium exited {dom.returncode}: {dom.stderr[-2000:]}")
            return 1
        shot = os.path.join(profile, "shot.png")
        try:
            subprocess.run(common + ["--window-size=1100,1600", f"--screenshot={shot}", url],
                           capture_output=True, timeout=120)
        except subprocess.TimeoutExpired:
            print("FAIL chromium --screenshot timed out")
            return 1
        fails = 0
        m = re.search(r"<title>(.*?)</title>", dom.stdout, re.S)
        title = m.group(1) if m else None
        if title == "charts-ok":
            print("ok   page loaded and every chart decoded (title charts-ok)")
        else:
            print(f"FAIL page title is {title!r}, want 'charts-ok'")
            fails += 1
        for chart in ["hitrate.svg", "ttft.svg"] + sys.argv[2:]:
            if f'src="{chart}"' in dom.stdout:
                print(f"ok   rendered DOM holds {chart}")
            else:
                print(f"FAIL rendered DOM lacks {chart}")
                fails += 1
        if 'id="recommendation"' in dom.stdout:
            print("ok   recommendation present")
        else:
            print("FAIL recommendation absent")
            fails += 1
        try:
            with open(shot, "rb") as f:
                png = f.read()
        except OSError:
            png = b""
        if png.startswith(b"\x89PNG") and len(png) > 20000:
            print(f"ok   screenshot {len(png)} bytes")
        else:
            print(f"FAIL screenshot missing or blank ({len(png)} bytes)")
            fails += 1
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
