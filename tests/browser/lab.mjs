// Shared by the browser tests: Debian's Chromium on a JupyterLab page, and notebook cells.

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";

const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";

// Chromium headless in a fresh profile, with no background network traffic.
// Returns { page, result, close }; console errors are collected in result.console, and
// where the page's uncaught exceptions were thrown in result.throwSites (recordThrowSites).
export async function openBrowser(viewport) {
  const result = { console: [] };
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "distrain-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport,
    args: [
      "--no-sandbox",
      "--headless",
      "--disable-gpu",
      "--disable-dev-shm-usage",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-default-apps",
      "--disable-extensions",
      "--disable-sync",
      "--no-first-run",
      "--metrics-recording-only",
    ],
  });
  const page = context.pages()[0] ?? (await context.newPage());
  // JupyterLab asks which kernel to start when it opens a notebook before it has the server's
  // kernel specs (seen once on a loaded machine, the notebook's kernelspec set): the
  // notebook's own kernel is preselected; accept it as a user would, and count it.
  await page.addLocatorHandler(
    page.locator(".jp-Dialog").filter({ hasText: "Select Kernel" }),
    async (dialog) => {
      result.kernelDialogs = (result.kernelDialogs ?? 0) + 1;
      await dialog.locator("button.jp-mod-accept").click();
    },
  );
  page.on("console", (msg) => {
    if (msg.type() === "error" && result.console.length < 50) result.console.push(msg.text());
  });
  page.on("pageerror", (err) => {
    if (result.console.length < 50) result.console.push(`pageerror: ${err.message}\n${(err.stack ?? "").slice(0, 1500)}`);
  });
  await recordThrowSites(page, result);
  const close = async () => {
    await context.close();
    fs.rmSync(profile, { recursive: true, force: true });
  };
  return { page, result, close };
}

// Where each uncaught exception of `page` was thrown, into result.throwSites (the last 10,
// innermost frame first, as script:line:column of the bundles): a thrown string (ipywidgets
// throws "Syncing error: ...") reaches "pageerror" with no stack. Through the DevTools
// protocol, which pauses the page at such a throw and resumes it at once.
async function recordThrowSites(page, result) {
  const cdp = await page.context().newCDPSession(page);
  cdp.on("Debugger.paused", (event) => {
    const frames = event.callFrames.slice(0, 10).map((frame) => {
      const where = `${frame.url.split("/").pop()}:${frame.location.lineNumber + 1}:${(frame.location.columnNumber ?? 0) + 1}`;
      return `${frame.functionName || "(anonymous)"} ${where}`;
    });
    result.throwSites = [...(result.throwSites ?? []).slice(-9), `${event.data?.description ?? event.data?.value ?? ""} at ${frames.join(" < ")}`];
    cdp.send("Debugger.resume").catch(() => {});
  });
  await cdp.send("Debugger.enable");
  await cdp.send("Debugger.setPauseOnExceptions", { state: "uncaught" });
}

// How long a page may take to open a notebook and connect its kernel. Waiting costs nothing
// when the page is quick; the browser tests run beside the rest of the suite, and on a
// 2-CPU host JupyterLab's first page of a new server took over 60 s to show a cell.
export const OPEN_TIMEOUT = 180_000;

// Waits until the page's notebook has its kernel connected: a cell run before that does
// nothing (JupyterLab's CodeCell.execute returns when the session has no kernel yet).
// JupyterLab's status bar then reads "... | Idle"; Notebook 7 has no status bar, and its
// kernel status, which says "Kernel Starting" and the like until then, shows nothing
// (faded) once the kernel is idle or busy.
async function waitForKernel(page) {
  await page.waitForFunction(
    () => {
      const bar = document.querySelector("#jp-main-statusbar");
      if (bar !== null && /\| Idle/.test(bar.textContent)) return true;
      const status = document.querySelector(".jp-NotebookKernelStatus");
      if (status === null) return false;
      const classes = status.classList;
      const said = ["info", "warn", "error"].some((kind) => classes.contains(`jp-NotebookKernelStatus-${kind}`));
      return classes.contains("jp-NotebookKernelStatus-fade") && !said;
    },
    null,
    { timeout: OPEN_TIMEOUT, polling: 100 },
  );
}

// Opens the notebook at `url` (a JupyterLab or Notebook 7 page) and waits until its first
// cell is shown and its kernel is connected: cells can run from then on. How long each part
// took goes to the harness's log.
export async function openNotebook(page, url) {
  const started = Date.now();
  await page.goto(url, { waitUntil: "domcontentloaded", timeout: OPEN_TIMEOUT });
  const loaded = Date.now();
  await page.locator(".jp-Notebook .jp-Cell").first().waitFor({ timeout: OPEN_TIMEOUT });
  const shown = Date.now();
  await waitForKernel(page);
  const seconds = (from, to) => ((to - from) / 1000).toFixed(1);
  console.error(
    `openNotebook: page ${seconds(started, loaded)} s, first cell ${seconds(loaded, shown)} s, ` +
      `kernel ${seconds(shown, Date.now())} s`,
  );
}

// Runs notebook cell `index`; retries when JupyterLab dropped the request (kernel not connected yet).
export async function runCell(page, index) {
  const cell = page.locator(".jp-Notebook .jp-Cell").nth(index);
  const prompt = cell.locator(".jp-InputPrompt").filter({ hasText: /\[(\*|\d+)\]/ });
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      await cell.locator(".jp-InputArea-editor").click({ timeout: 90_000 });
    } catch (error) {
      // say what covered the cell (a dialog's own words), not only that the click timed out
      const dialogs = await page.locator(".jp-Dialog").allInnerTexts();
      throw new Error(`${error.message}\ndialogs open: ${JSON.stringify(dialogs)}`);
    }
    await page.keyboard.press("Shift+Enter");
    try {
      await prompt.waitFor({ timeout: 10_000 });
      return cell;
    } catch {
      // not started: try again (said in the harness's log: a page this late may yet run it twice)
      const said = await cell.locator(".jp-InputPrompt").innerText().catch(() => "?");
      console.error(`runCell(${index}): no run 10 s after Shift+Enter (prompt ${JSON.stringify(said)}); again`);
    }
  }
  throw new Error(`cell ${index} did not start`);
}

// Defines `window.distrainOnChange(check, { perFrame })` in the page (again after each
// navigation), which calls `check()` on changes of the notebook's DOM, however late a page
// short of CPU runs its timers: by default in the next animation frame after a change, so every
// frame that shows a change is checked once (a state no frame paints, such as a widget's
// element before its layout applied, is not one a user sees); with `perFrame: false` at every
// change. It returns a function that stops the checks.
export async function defineChangeWatch(page) {
  await page.evaluate(() => {
    window.distrainOnChange = (check, { perFrame = true } = {}) => {
      let queued = false;
      const observer = new MutationObserver(() => {
        if (!perFrame) return check(); // at each change, before the frame that paints it
        if (queued) return;
        queued = true;
        requestAnimationFrame(() => {
          queued = false;
          check();
        });
      });
      observer.observe(document.querySelector(".jp-Notebook") ?? document.body, {
        subtree: true, childList: true, attributes: true, characterData: true,
      });
      return () => observer.disconnect();
    };
  });
}

// A dashboard's display is replaced once after its job ends (the display's saved snapshot is
// refreshed: the output re-renders the widget as a new element). `watchReplacement` counts,
// from now on, the removals of the element of class `cls`; `replaced` waits until one
// happened and the new element is in place: a screenshot begun on the old one would fail
// ("not attached to the DOM"). Start watching before the job can end.
export async function watchReplacement(page, cls) {
  await page.evaluate((cls) => {
    window.distrainReplaced = window.distrainReplaced ?? {};
    window.distrainReplaced[cls] = 0;
    const gone = (node) => node.nodeType === 1 && (node.classList.contains(cls) || node.querySelector(`.${cls}`) !== null);
    new MutationObserver((records) => {
      if (records.some((r) => [...r.removedNodes].some(gone))) window.distrainReplaced[cls] += 1;
    }).observe(document.querySelector(".jp-Notebook") ?? document.body, { subtree: true, childList: true });
  }, cls);
}

export async function replaced(page, cls, timeout = 60_000) {
  await page.waitForFunction(
    (cls) => window.distrainReplaced[cls] > 0 && document.querySelector(`.${cls}`)?.isConnected,
    cls,
    { timeout },
  );
}

// Runs `read(element)` in the page on the element `selector` finds now, in one step (null when
// none). Through a locator the element is found first and read after, so a node the page
// replaced in between (the jobs panel after a poll, a widget after a render) reads as detached:
// no computed style, no size, innerText without line breaks.
export function readNow(page, selector, read) {
  return page.evaluate(`(() => {
    const el = document.querySelector(${JSON.stringify(selector)});
    return el === null ? null : (${read})(el);
  })()`);
}

// Waits until a cell has run: its prompt reads "[3]:" (while running it shows "[*]:"). As
// long as a page may take to open a notebook: `%load_ext` on a loaded 2-CPU host is no quicker.
export async function waitForPrompt(cell) {
  await cell.locator(".jp-InputPrompt").filter({ hasText: /\[\d+\]/ }).waitFor({ timeout: OPEN_TIMEOUT });
}

// Runs a script's steps; a failure is recorded in result.error with a screenshot
// (after `onError`, which may add to result). Then closes the browser, prints
// the result as one JSON line and exits (1 on failure).
export async function runScenario({ page, result, close }, outDir, steps, onError) {
  try {
    await steps();
  } catch (err) {
    result.error = String(err?.stack ?? err);
    // what the page showed then, in words (the screenshot stays on the machine that ran it)
    result.pageText = await page
      .evaluate(() => document.body?.innerText.slice(0, 2000) ?? "")
      .catch((e) => `(unreadable: ${e.message})`);
    if (onError) await onError().catch(() => {});
    await page.screenshot({ path: path.join(outDir, "failure.png") }).catch(() => {});
  } finally {
    await close();
  }
  // exit once the whole line is written: a pipe takes 64 KiB at a time, and an exit right
  // after write() would cut a longer result
  process.stdout.write(JSON.stringify(result) + "\n", () => process.exit(result.error ? 1 : 0));
}
