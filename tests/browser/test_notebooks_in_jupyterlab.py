"""The notebooks in a real browser: JupyterLab 4 in headless Chromium, driven by selenium.

For every solution notebook (found in solutions/, so new notebooks are included): Run All, no
cell shows an error, every check box is green, one widget works live (type into its text box or
move its slider and the picture changes, and no label is cut), then save, reopen with a fresh
kernel and see a picture, not "Error displaying widget", in every widget cell. For learner
notebook 01: Run All shows ⏳ boxes; a wrong softmax typed in gets a red box naming the cause.

Run with ``python -m pytest -m browser tests/browser`` (see conftest.py); screenshots of every
widget and of every failure go to the folder printed at the end.
"""

from __future__ import annotations

import re
import time

import labkit
import pytest
from labkit import Notebook

pytestmark = pytest.mark.browser

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
STATIC_TEXT = "(interactive widget"  # the text/plain of a tutor.viz widget's bundle
RUN_ALL_TIMEOUT = 1200  # seconds; the machine may be loaded (notebook 08 runs with TUTOR_QUICK=1)
SOLUTIONS = sorted(p for p in (labkit.ROOT / "solutions").glob("[0-9][0-9]_*.ipynb") if ".backup" not in p.name)
TIMINGS: dict[str, float] = {}


def _number(path) -> int:
    return int(path.name[:2])


def expected_checks(number: int) -> set[str]:
    from tutor.course import catalog

    return {e.name for e in catalog.exercises(number)}


def error_outputs(cells) -> list[str]:
    found = []
    for cell in cells:
        for output in cell["outputs"]:
            if output.get("output_type") == "error":
                first = cell["source"].strip().splitlines()[0] if cell["source"].strip() else ""
                found.append(f"cell {cell['index']} ({first[:60]!r}): {output.get('ename')}: {output.get('evalue')}")
    return found


def is_green(css_colour: str) -> bool:
    r, g, b = (int(v) for v in re.findall(r"\d+", css_colour)[:3])
    return g > 120 and g > r + 40 and g > b + 40


def is_red(css_colour: str) -> bool:
    r, g, b = (int(v) for v in re.findall(r"\d+", css_colour)[:3])
    return r > 150 and r > g + 60 and r > b + 60


def interact(driver, nb: Notebook, index: int) -> str:
    """Use one control of the widget in cell ``index`` as a learner would; say what was done."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    nb.scroll_to(index)
    node = nb.cell_node(index)
    texts = node.find_elements(By.CSS_SELECTOR, ".widget-text input")
    if texts:
        box = texts[0]
        box.click()
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys("maximilian", Keys.ENTER)
        return "typed 'maximilian' into its text box"
    handles = node.find_elements(By.CSS_SELECTOR, ".noUi-handle, .ui-slider-handle")
    if handles:
        ActionChains(driver).click_and_hold(handles[0]).move_by_offset(-45, 0).release().perform()
        return "dragged its slider"
    selects = node.find_elements(By.CSS_SELECTOR, "select")
    if selects:
        choice = Select(selects[0])
        choice.select_by_index(len(choice.options) - 1)
        return "picked the last option of its drop-down"
    raise AssertionError(f"cell {index}: the widget has no text box, slider or drop-down")


def wait_for_new_picture(nb: Notebook, index: int, before: list[dict], timeout: float = 240) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = nb.images_in(index)
        if now and [i["src"] for i in now] != [i["src"] for i in before] and all(i["natural"][0] > 0 for i in now):
            return now
        time.sleep(0.5)
    raise AssertionError(f"cell {index}: the picture did not change within {timeout:.0f} s of using the widget")


def saved_widget_cells(saved: dict) -> list[int]:
    return [i for i, cell in enumerate(saved["cells"]) for o in cell.get("outputs", [])
            if STATIC_TEXT in "".join(o.get("data", {}).get("text/plain", ""))]


@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_solution_notebook_runs_saves_and_reopens(path, lab, browser, workdir, shots):
    number = _number(path)
    nb = Notebook(browser, lab, f"solutions/{path.name}").open()
    TIMINGS[path.stem] = nb.run_all(timeout=RUN_ALL_TIMEOUT)

    # 1. No cell shows an error; every check box is green, and every exercise has one.
    cells = nb.cells()
    assert not error_outputs(cells), "cells show errors:\n" + "\n".join(error_outputs(cells))
    boxes = nb.check_boxes()
    not_green = [b for b in boxes if not b["text"].startswith("✅") or not is_green(b["border"])]
    assert not not_green, f"check boxes that are not green: {not_green}"
    shown = {re.match(r"^\S+ (\w+):", b["text"]).group(1) for b in boxes}
    missing = expected_checks(number) - shown
    assert not missing, f"exercises whose check box is not shown: {sorted(missing)}"

    # 2. Widgets are live: using one changes its picture; no label is cut short.
    widget_cells = nb.widget_cells()
    assert widget_cells, (f"{path.name} shows no live widget: every notebook needs at least one "
                          f"(a tutor.viz explorer, built with tutor.viz.interactive)")
    for index in widget_cells:
        assert not nb.cut_labels(index), f"cell {index}: widget labels cut short: {nb.cut_labels(index)}"
    texts = [i for i in widget_cells if "widget-text" in nb.js(labkit.JS_PANEL +
             "return w.content.widgets[arguments[0]].outputArea.node.innerHTML;", i)]
    index = (texts or widget_cells)[0]
    before = nb.images_in(index)
    assert before, f"cell {index}: the widget shows no picture"
    done = interact(browser, nb, index)
    after = wait_for_new_picture(nb, index, before)
    nb.cell_node(index).screenshot(str(shots / f"{path.stem}-live.png"))
    ratio = after[0]["shown"][0] / max(1, before[0]["shown"][0])
    print(f"{path.stem}: {done}; the picture changed; width {before[0]['shown'][0]} -> {after[0]['shown'][0]} px")
    assert 0.8 < ratio < 1.25 or "typed" in done, f"the picture jumped in size on first use ({ratio:.2f}x)"
    assert not error_outputs(nb.cells()), "using the widget raised in the kernel"

    # 3. Save: the file holds pictures, not live widget views (the tutor_jupyter pre-save hook).
    nb.save()
    saved = labkit.read_saved(workdir / "solutions" / path.name)
    views = [i for i, c in enumerate(saved["cells"]) for o in c.get("outputs", []) if WIDGET_VIEW in o.get("data", {})]
    assert not views, f"saved cells {views} still hold live widget views"
    saved_widgets = saved_widget_cells(saved)
    assert len(saved_widgets) == len(widget_cells)
    for i in saved_widgets:
        assert any("image/png" in o.get("data", {}) for o in saved["cells"][i]["outputs"]), f"cell {i} saved no picture"

    # 4. Reopen without the old kernel: every widget cell shows its picture, no widget error.
    lab.shutdown_kernels()
    nb.close()
    nb.open()
    time.sleep(3)  # let the widget renderer try (and fail, if it would) to find its models
    page = browser.find_element("tag name", "body").text
    assert "Error displaying widget" not in page
    for i in saved_widgets:
        images = nb.images_in(i)
        assert images and images[0]["natural"][0] > 0, f"cell {i} shows no picture after reopening"
    if saved_widgets:
        nb.scroll_to(saved_widgets[-1])
        nb.cell_node(saved_widgets[-1]).screenshot(str(shots / f"{path.stem}-reopened.png"))
    lab.shutdown_kernels()
    print(f"{path.stem}: Run All took {TIMINGS[path.stem]:.0f} s (wall time, in the browser)")


WRONG_SOFTMAX = "def softmax(x, dim=-1): return x.exp() / x.exp().sum(dim=dim, keepdim=True)"


def test_learner_notebook_01_not_done_then_a_wrong_softmax(lab, browser, shots):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    nb = Notebook(browser, lab, "notebooks/01_dot_product_attention.ipynb").open()
    nb.run_all(timeout=RUN_ALL_TIMEOUT)
    cells = nb.cells()
    assert not error_outputs(cells), "a blank learner notebook must run top to bottom"
    boxes = nb.check_boxes()
    assert boxes and all(b["text"].startswith("⏳") and "not done yet" in b["text"] for b in boxes), boxes

    index = next(c["index"] for c in cells if "def softmax(" in c["source"])
    assert "checks.softmax(softmax)" in cells[index + 1]["source"]
    nb.scroll_to(index)
    editor = nb.cell_node(index).find_element(By.CSS_SELECTOR, ".cm-content")
    editor.click()
    editor.send_keys(Keys.CONTROL, "a")
    editor.send_keys(WRONG_SOFTMAX)
    editor.send_keys(Keys.SHIFT, Keys.ENTER)  # run the definition, move to the check cell
    time.sleep(1)
    browser.switch_to.active_element.send_keys(Keys.SHIFT, Keys.ENTER)  # run the check
    deadline = time.monotonic() + 120
    box = None
    while time.monotonic() < deadline and box is None:
        box = next((b for b in nb.check_boxes() if b["text"].startswith("❌ softmax")), None)
        time.sleep(0.5)
    nb.cell_node(index + 1).screenshot(str(shots / "01-learner-wrong-softmax.png"))
    assert box is not None, "no red softmax box after running the check on a wrong softmax"
    assert is_red(box["border"]), box
    text = nb.cells()[index + 1]["text"]
    assert "Likely cause" in text and "max" in text, f"the message does not name the cause:\n{text}"
    assert nb.cells()[index]["source"] == WRONG_SOFTMAX
    lab.shutdown_kernels()
