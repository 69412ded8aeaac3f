#!/usr/bin/python3
"""`xgrad explore`'s page in a real browser: Debian's chromium, headless, driven by chromedriver
through python3-selenium (installed by ./scripts/test). Usage:

    check_explore_page.py XGRAD FIXTURES_DIR SCREENSHOT_DIR

1. MultiheadAttention (tests/fixtures/io/attention/basic: key padding and an attn_mask, float64):
   the page loads from disk with no console error and no request outside the file; hovering a
   cell shows P, dL/dP and dL/dS equal, bit for bit, to what `xgrad inspect --dump` writes for the
   same problem; masked cells say so; clicking a head changes the map; choosing a position changes
   the gradient views and not P; keys move between heads and views; a screenshot of each view. A
   query whose every key is masked: its row is zeros, marked, with dL/dS = 0 and a marked ‖dQ‖.
2. A small GPT trained here for a few steps: every layer reachable with the keys, the head table
   with induction and previous-token scores, a position picked by clicking its query row.
3. The same GPT with a corrupted text: the clean/corrupted section holds what `xgrad patch`
   writes (exact and AtP per head to float32 rounding, the logit lens exactly), and clicking a head
   there shows it above.
4. The check of outside requests fails on a page that makes one (so it can fail).
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select
except ImportError:
    sys.exit("FAIL: python3-selenium is missing (./scripts/test installs it with chromium and chromium-driver)")


def fail(message):
    sys.exit("FAIL: " + message)


def run(*args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{' '.join(map(str, args))}: exit status {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1700,1100",
                "--disable-dev-shm-usage", "--no-first-run"]:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def load(driver, page):
    """Opens the page; returns the console errors and the requests for anything but the file itself."""
    driver.get_log("browser"), driver.get_log("performance")  # drop what an earlier page left
    driver.get("file://" + os.path.abspath(page))
    driver.find_element(By.ID, "map")
    driver.execute_script("return document.readyState")
    errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    url = "file://" + os.path.abspath(page)
    outside = []
    for entry in driver.get_log("performance"):
        m = re.search(r'"method":"Network.requestWillBeSent".*?"url":"([^"]*)"', entry["message"])
        if m and m.group(1) != url and not m.group(1).startswith("data:"):
            outside.append(m.group(1))
    return errors, outside


def open_clean(driver, page):
    errors, outside = load(driver, page)
    if errors:
        fail(f"{page}: console errors: {errors}")
    if outside:
        fail(f"{page}: requests leaving the file: {outside}")


def state(driver):
    m = driver.find_element(By.ID, "map")
    return {k: m.get_attribute("data-" + k) for k in ("site", "head", "choice", "view")}


def map_image(driver):
    return driver.execute_script("return document.getElementById('map').toDataURL()")


def thumbnail(driver, site, head):
    """The head's small map in the grid (the big map outlines the chosen position's row)."""
    return driver.execute_script(
        f"return document.querySelector('.head[data-site=\"{site}\"][data-head=\"{head}\"] canvas').toDataURL()")


def hover(driver, i, j):
    """The tooltip's lines over cell (query i, key j) of the map, reached with the mouse."""
    canvas = driver.find_element(By.ID, "map")
    x, y = driver.execute_script("const c = window.xgradExplore.cellCenter(arguments[0], arguments[1]); return [c.x, c.y];", i, j)
    width, height = canvas.size["width"], canvas.size["height"]
    ActionChains(driver).move_to_element_with_offset(canvas, int(x - width / 2), int(y - height / 2)).perform()
    tip = driver.find_element(By.ID, "tooltip")
    if tip.get_attribute("data-i") != str(i) or tip.get_attribute("data-j") != str(j):
        fail(f"hover over ({i}, {j}) showed cell ({tip.get_attribute('data-i')}, {tip.get_attribute('data-j')})")
    return tip.text.split("\n")


def shown(lines, name):
    for line in lines:
        if line.startswith(name + " = "):
            return float(line.split(" = ")[1])
    return None


def click_head(driver, site, head):
    driver.find_element(By.CSS_SELECTOR, f'.head[data-site="{site}"][data-head="{head}"]').click()


def press(driver, key):
    ActionChains(driver).send_keys(key).perform()


def check_attention(driver, xgrad, fixtures, shots, work):
    folder = os.path.join(fixtures, "io", "attention", "basic", "in")
    run(xgrad, "inspect", "--from", folder, "--dump", os.path.join(work, "dump"))
    page = os.path.join(work, "mha.html")
    run(xgrad, "explore", folder, "--out", page, "--positions", "3")
    one = lambda pattern: np.load(glob.glob(os.path.join(work, "dump", pattern))[0])
    P, dP, dS = one("*-weights.npy"), one("*-weights.grad.npy"), one("*-weights.scores.grad.npy")
    heads = 2  # (B·H, L, S): sequence 0 is rows 0 .. H-1
    open_clean(driver, page)
    driver.save_screenshot(os.path.join(shots, "mha-weights.png"))
    checked = masked = 0
    for h in range(heads):
        click_head(driver, 0, h)
        if state(driver)["head"] != str(h):
            fail(f"clicking head {h} selected {state(driver)}")
        for i in range(P.shape[1]):
            for j in range(P.shape[2]):
                lines = hover(driver, i, j)
                if np.isinf(one("*-weights.scores.npy")[h, i, j]):
                    masked += 1
                    if not any("masked" in line for line in lines) or shown(lines, "dL/dS") != 0:
                        fail(f"masked cell ({h}, {i}, {j}) shows {lines}")
                    continue
                for name, want in (("P", P), ("dL/dP", dP), ("dL/dS", dS)):
                    if shown(lines, name) != want[h, i, j]:
                        fail(f"head {h} cell ({i}, {j}): {name} shown {shown(lines, name)!r}, --dump has {want[h, i, j]!r}")
                checked += 1
    if checked < 6 or masked < 1:
        fail(f"checked {checked} cells and {masked} masked ones: the fixture should have both")
    before = map_image(driver)
    click_head(driver, 0, 0)
    if map_image(driver) == before:
        fail("clicking another head left the map unchanged")
    # Views and a position's loss: P stays, the gradients change.
    driver.find_element(By.CSS_SELECTOR, '#views button[data-view="2"]').click()
    whole = map_image(driver)
    driver.save_screenshot(os.path.join(shots, "mha-dscores.png"))
    Select(driver.find_element(By.ID, "choice")).select_by_visible_text("query 1")
    if state(driver)["choice"] == "0" or map_image(driver) == whole:
        fail(f"choosing query 1's loss left dL/dS unchanged: {state(driver)}")
    driver.save_screenshot(os.path.join(shots, "mha-dscores-query1.png"))
    dscores_query1 = thumbnail(driver, 0, 0)
    driver.find_element(By.CSS_SELECTOR, '#views button[data-view="0"]').click()
    p_query1 = thumbnail(driver, 0, 0)
    Select(driver.find_element(By.ID, "choice")).select_by_visible_text("whole loss")
    if thumbnail(driver, 0, 0) != p_query1:
        fail("P changed with the loss chosen")
    driver.find_element(By.CSS_SELECTOR, '#views button[data-view="2"]').click()
    if thumbnail(driver, 0, 0) == dscores_query1:
        fail("dL/dS of head 0 is the same for the whole loss and query 1's")
    driver.find_element(By.CSS_SELECTOR, '#views button[data-view="0"]').click()
    press(driver, Keys.ARROW_RIGHT)
    if state(driver)["head"] != "1":
        fail(f"→ did not move to head 1: {state(driver)}")
    press(driver, "v")
    if state(driver)["view"] != "dweights":
        fail(f"v did not move to dL/dP: {state(driver)}")
    driver.save_screenshot(os.path.join(shots, "mha-dweights.png"))
    press(driver, "s")
    driver.save_screenshot(os.path.join(shots, "mha-dweights-log.png"))
    print(f"attention page: {checked} cells equal to --dump, {masked} masked cells")


def check_fully_masked_row(driver, xgrad, fixtures, shots, work):
    """Query 0 of sequence 0 with every key masked (attn_mask -inf on key 0, key padding on the
    rest): its row is zeros and says so, its dL/dS is 0, its ‖dQ‖ bar is marked."""
    import shutil
    folder = os.path.join(work, "masked_row")
    shutil.copytree(os.path.join(fixtures, "io", "attention", "basic", "in"), folder)
    padding = np.load(os.path.join(folder, "key_padding_mask.npy"))
    padding[0, 1:] = True
    np.save(os.path.join(folder, "key_padding_mask.npy"), padding)
    mask = np.load(os.path.join(folder, "attn_mask.npy"))
    mask[0, 0] = -np.inf
    np.save(os.path.join(folder, "attn_mask.npy"), mask)
    page = os.path.join(work, "masked_row.html")
    run(xgrad, "explore", folder, "--out", page)
    open_clean(driver, page)
    driver.find_element(By.CSS_SELECTOR, '#views button[data-view="2"]').click()
    for j in range(5):
        lines = hover(driver, 0, j)
        if not any(line.startswith("fully masked row") for line in lines) or shown(lines, "P") != 0 or shown(lines, "dL/dS") != 0:
            fail(f"fully masked row, key {j}: {lines}")
    lines = hover(driver, 1, 0)
    if any("fully masked" in line for line in lines):
        fail(f"row 1 is not fully masked: {lines}")
    bars = driver.find_elements(By.CSS_SELECTOR, "#qkv .bar-row")
    if "masked" not in bars[0].find_element(By.CSS_SELECTOR, ".bar").get_attribute("class"):
        fail("the fully masked query's ‖dQ‖ bar is not marked")
    driver.save_screenshot(os.path.join(shots, "mha-fully-masked-row.png"))
    print("fully masked row: zeros, marked, dL/dS = 0")


def check_gpt(driver, xgrad, shots, work):
    text = os.path.join(work, "text.txt")
    with open(text, "w") as f:
        f.write("the cat sat on the mat. the dog sat on the log. " * 60)
    run(xgrad, "train", "gpt", "--text", text, "--n_layer", "2", "--n_head", "2", "--n_embd", "32", "--block_size", "32",
        "--batch_size", "8", "--max_iters", "60", "--eval_interval", "60", "--eval_iters", "2", "--out", os.path.join(work, "gpt"))
    page = os.path.join(work, "gpt.html")
    out = run(xgrad, "explore", os.path.join(work, "gpt", "checkpoint.npz"), "--corpus", text, "--length", "24",
              "--head-sequences", "16", "--out", page)
    if "2 attention(s), 25 loss(es)" not in out:
        fail(f"explore on the GPT printed: {out}")
    open_clean(driver, page)
    rows = driver.find_elements(By.CSS_SELECTOR, "#head-table tr[data-site]")
    if len(rows) != 4 or not all(re.search(r"\d\.\d{3}", r.text) for r in rows):
        fail(f"head table: {[r.text for r in rows]}")
    press(driver, Keys.ARROW_DOWN)
    if state(driver)["site"] != "1":
        fail(f"↓ did not move to layer 1: {state(driver)}")
    driver.find_element(By.CSS_SELECTOR, '#views button[data-view="2"]').click()
    canvas = driver.find_element(By.ID, "map")
    x, y = driver.execute_script("const c = window.xgradExplore.cellCenter(5, 0); return [c.x, c.y];")
    ActionChains(driver).move_to_element_with_offset(canvas, int(x - canvas.size["width"] / 2),
                                                     int(y - canvas.size["height"] / 2)).click().perform()
    if not Select(driver.find_element(By.ID, "choice")).first_selected_option.text.startswith("position 5:"):
        fail("clicking query row 5 did not choose position 5's loss")
    driver.save_screenshot(os.path.join(shots, "gpt-dscores-position5.png"))
    print(f"GPT page: {os.path.getsize(page)} bytes, 2 layers, position chosen by clicking its row")


def check_patching(driver, xgrad, shots, work):
    """--corrupt-text on the GPT above: the page's exact and AtP per head and its logit lens are what
    `xgrad patch` writes for the same checkpoint and texts (to float32 rounding); a head clicked
    there is shown above."""
    checkpoint = os.path.join(work, "gpt", "checkpoint.npz")
    texts = ["--loss-from", "3"]
    page, patched = os.path.join(work, "gpt-patch.html"), os.path.join(work, "patch")
    run(xgrad, "explore", checkpoint, "--text", "the cat sat on the mat.", "--corrupt-text", "the dog sat on the log.",
        "--head-sequences", "0", "--out", page, *texts)
    run(xgrad, "patch", "--checkpoint", checkpoint, "--clean-text", "the cat sat on the mat.", "--corrupt-text",
        "the dog sat on the log.", "--to", patched, *texts)
    open_clean(driver, page)
    if not driver.find_element(By.ID, "patching").is_displayed():
        fail("the clean/corrupted section is hidden on a page made with --corrupt-text")
    p = driver.execute_script("return window.xgradExplore.data.patching")
    npy = lambda name: np.load(os.path.join(patched, name + ".npy"))
    head, into = npy("patch.head"), float(npy("corrupt_metric"))
    if p["layers"] != 2 or p["heads"] != 2:
        fail(f"patching section: {p['layers']} layers x {p['heads']} heads, the model has 2 x 2")
    # the page patches heads only, xgrad patch every set: the clean run's other hooks leave the
    # residual adds unfused, so float32 rounding may differ
    same = lambda a, b: np.allclose(np.array(a, dtype=float), np.array(b, dtype=float), rtol=1e-5, atol=1e-6)
    if not same(p["exact"], (head - into).ravel()):
        fail(f"exact effects {p['exact']} differ from xgrad patch's {(head - into).ravel()}")
    if not same(p["atp"], npy("atp.head").ravel()):
        fail(f"AtP {p['atp']} differs from xgrad patch's {npy('atp.head').ravel()}")
    if not np.array_equal(np.array(p["lens_clean"]), npy("logit_lens")):
        fail(f"logit lens {p['lens_clean']} differs from xgrad patch's {npy('logit_lens')}")
    if not same([p["clean_metric"], p["corrupt_metric"]], [npy("clean_metric"), into]):
        fail("the runs' metrics differ from xgrad patch's")
    if np.allclose(p["lens_clean"], p["lens_corrupt"]):
        fail(f"the two runs' logit lenses are equal: {p['lens_clean']}")
    pearson = np.corrcoef(head.ravel() - into, npy("atp.head").ravel())[0, 1]
    title = driver.find_element(By.ID, "scatter-title").text
    if f"Pearson {pearson:.3f}" not in title:
        fail(f"scatter title '{title}', numpy's Pearson {pearson:.3f}")
    canvas = driver.find_element(By.ID, "patch-atp")  # layer 1, head 0: 28 px of labels, 18 of header, 26 a cell
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", canvas)
    ActionChains(driver).move_to_element_with_offset(canvas, int(28 + 13 - canvas.size["width"] / 2),
                                                     int(18 + 26 + 13 - canvas.size["height"] / 2)).click().perform()
    if (state(driver)["site"], state(driver)["head"]) != ("1", "0"):
        fail(f"clicking layer 1 head 0 of the AtP grid showed {state(driver)}")
    readout = driver.find_element(By.ID, "patch-readout").text
    if not readout.startswith("layer 1 head 0: exact"):
        fail(f"readout after the click: '{readout}'")
    driver.save_screenshot(os.path.join(shots, "gpt-patching.png"))
    print(f"patching section: exact and AtP per head as xgrad patch wrote them, Pearson {pearson:.3f}")


def check_outside_request_is_caught(driver, work):
    page = os.path.join(work, "mha.html")
    with open(page) as f:
        html = f.read()
    bad = os.path.join(work, "bad.html")
    with open(bad, "w") as f:
        f.write(html.replace("<body>", '<body><img src="http://127.0.0.1:9/outside.png">', 1))
    errors, outside = load(driver, bad)
    if not outside and not errors:
        fail("a page that asks for http://127.0.0.1:9/outside.png passed the check")


def main():
    xgrad, fixtures, shots = sys.argv[1:4]
    os.makedirs(shots, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        driver = browser()
        try:
            check_attention(driver, xgrad, fixtures, shots, work)
            check_fully_masked_row(driver, xgrad, fixtures, shots, work)
            check_gpt(driver, xgrad, shots, work)
            check_patching(driver, xgrad, shots, work)
            check_outside_request_is_caught(driver, work)
        finally:
            driver.quit()
    print(f"screenshots in {shots}")


main()
