"""Open every executed notebook in JupyterLab in headless Chromium, screenshot it and check what a reader sees.

`make browser-check` (not part of `make test`): starts JupyterLab on a free local port with a random token,
serving `build/notebooks/` (the executed `NN_*.ipynb` written by `make reproduce` or the notebook smoke runs),
opens each notebook, saves `build/screenshots/NN_name.png` (the whole notebook in one tall viewport) and fails
when a notebook shows a stderr or error output, a widget that cannot be displayed, or fewer rendered figures
than the notebook holds (or none at all). Needs Debian's `chromium` (`apt-get install chromium`) and the
`browser` extra (python `playwright`, driving that system browser; playwright's own browsers are not used).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]
MAX_SHOT_HEIGHT = 15_000  # px; a taller notebook's screenshot shows its first 15,000 px (the checks see all cells)
STDERR_MIME = "application/vnd.jupyter.stderr"  # JupyterLab renders stderr streams and tracebacks with it
LAB_SETTINGS = {  # every cell in the DOM (no windowing), so the checks and the screenshot see the whole notebook
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                       "checkForUpdates": False},
}


@dataclass(frozen=True)
class PageReport:
    """What one executed notebook showed in the browser."""

    name: str
    """The notebook file name, e.g. `01_passk_es_vs_grpo.ipynb`."""
    stderr_outputs: int
    """Rendered outputs with the stderr MIME type (stderr streams and error tracebacks)."""
    widget_errors: int
    """Outputs that say "Error displaying widget" (a widget whose state was not saved)."""
    figures_expected: int
    """`image/png` outputs stored in the notebook file."""
    figures_rendered: int
    """Rendered images in the page that loaded (natural width > 0)."""
    screenshot: Path
    """Where the screenshot was saved."""

    @property
    def problems(self) -> list[str]:
        out = []
        if self.stderr_outputs:
            out.append(f"{self.stderr_outputs} stderr/error output(s)")
        if self.widget_errors:
            out.append(f"{self.widget_errors} widget(s) not displayed")
        if self.figures_expected == 0 or self.figures_rendered < self.figures_expected:
            out.append(f"figures rendered {self.figures_rendered} of {self.figures_expected} stored")
        return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stored_figures(notebook: Path) -> int:
    nb = json.loads(notebook.read_text())
    return sum("image/png" in o.get("data", {}) for c in nb["cells"] for o in c.get("outputs", []))


def start_lab(root: Path, settings_dir: Path, port: int, token: str) -> subprocess.Popen:
    for name, value in LAB_SETTINGS.items():
        (settings_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (settings_dir / name).write_text(json.dumps(value))
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
           f"--LabApp.user_settings_dir={settings_dir}", f"--LabApp.workspaces_dir={settings_dir / 'workspaces'}",
           *(["--allow-root"] if os.geteuid() == 0 else [])]
    log = settings_dir / "lab.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2)
            return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with code {proc.returncode}: {' '.join(cmd)}\n"
                                   f"{log.read_text()[-2000:]}") from None
            time.sleep(0.5)
    proc.terminate()
    raise RuntimeError(f"jupyter lab did not answer on port {port} within 120 s")


def check_page(page, base_url: str, token: str, notebook: Path, shots: Path) -> PageReport:
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(f"{base_url}/lab/tree/{notebook.name}?token={token}&reset")
    panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)").first
    panel.locator(".jp-Cell").first.wait_for(timeout=120_000)
    page.wait_for_load_state("networkidle")
    page.wait_for_function("() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) img')]"
                           ".every(i => i.complete)", timeout=60_000)
    time.sleep(2)  # widgets restore from the saved state after the outputs
    height = panel.evaluate("p => Math.max(...[...p.querySelectorAll('.jp-Notebook, .jp-WindowedPanel-outer')]"
                            ".map(e => e.scrollHeight))")
    page.set_viewport_size({"width": 1400, "height": min(int(height) + 200, MAX_SHOT_HEIGHT)})
    time.sleep(1)
    shot = shots / f"{notebook.stem}.png"
    page.screenshot(path=str(shot))
    return PageReport(
        name=notebook.name,
        stderr_outputs=panel.locator(f'[data-mime-type="{STDERR_MIME}"]').count(),
        widget_errors=panel.get_by_text("Error displaying widget").count(),
        figures_expected=stored_figures(notebook),
        figures_rendered=panel.locator(".jp-RenderedImage img").evaluate_all(
            "imgs => imgs.filter(i => i.naturalWidth > 0).length"),
        screenshot=shot,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebooks", type=Path, default=REPO_ROOT / "build" / "notebooks",
                        help="directory of executed NN_*.ipynb (default build/notebooks)")
    parser.add_argument("--screenshots", type=Path, default=REPO_ROOT / "build" / "screenshots")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args(argv)
    notebooks = sorted(p for p in args.notebooks.glob("[0-9][0-9]_*.ipynb") if not p.name.endswith(".input.ipynb"))
    if not notebooks:
        print(f"esreason: error: no executed notebooks NN_*.ipynb in {args.notebooks} (run make reproduce)",
              file=sys.stderr)
        return 2
    if not Path(args.chromium).is_file():
        print(f"esreason: error: --chromium {args.chromium!r} does not exist (apt-get install chromium)",
              file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    args.screenshots.mkdir(parents=True, exist_ok=True)
    port, token = free_port(), secrets.token_hex(16)
    reports: list[PageReport] = []
    with tempfile.TemporaryDirectory(prefix="esreason-lab-") as settings:
        lab = start_lab(args.notebooks.resolve(), Path(settings), port, token)
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=args.chromium, args=CHROMIUM_FLAGS)
                page = browser.new_page()
                for notebook in notebooks:
                    report = check_page(page, f"http://127.0.0.1:{port}", token, notebook, args.screenshots)
                    reports.append(report)
                    status = "; ".join(report.problems) or "ok"
                    print(f"{report.name}: {report.figures_rendered}/{report.figures_expected} figures, "
                          f"{report.stderr_outputs} stderr, {report.widget_errors} widget errors -> {status} "
                          f"({report.screenshot})", flush=True)
                browser.close()
        finally:
            lab.terminate()
            lab.wait(timeout=30)
    failed = [r.name for r in reports if r.problems]
    print(f"browser check: {len(reports) - len(failed)}/{len(reports)} notebooks clean"
          + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
