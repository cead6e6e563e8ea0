// Drives JupyterLab in Debian's Chromium to check the notifications of job ends.
//
//   node notify.mjs BASE_URL NOTEBOOK OUT_DIR
//
// The notebook (written by test_notify_browser.py) has three code cells: load
// the extension, a short job that succeeds ("notify-ok"), a job whose rank 1
// raises ("notify-fail"). The sidebar stays closed (the user works
// elsewhere). Every toast that appears is recorded by a MutationObserver;
// the script clicks the success toast's "Show logs", then, with the logs in
// front, the error toast's "Open notebook". Saves screenshots in OUT_DIR and
// prints one JSON object of what it saw. Exit code 1 (with {"error": ...})
// when a step times out.

import fs from "node:fs";
import path from "node:path";
import { openBrowser, openNotebook, runCell as runCellOn, runScenario, waitForPrompt } from "./lab.mjs";

const [baseUrl, notebook, outDir] = process.argv.slice(2);
const JOB_TIMEOUT = 180_000;

fs.mkdirSync(outDir, { recursive: true });
const { page, result, close } = await openBrowser({ width: 1400, height: 900 });
const runCell = (index) => runCellOn(page, index);

const toast = (text) => page.locator(".Toastify__toast").filter({ hasText: text });

async function describe(text) {
  return toast(text).evaluate((el) => ({
    text: el.querySelector(".jp-toast-message")?.textContent ?? el.textContent,
    classes: el.className,
    buttons: [...el.querySelectorAll("button")].map((b) => b.textContent.trim()).filter(Boolean),
  }));
}

// Until the toast has slid in (fully inside the window), for its screenshot.
async function settled(text) {
  await toast(text).evaluate(
    (el) =>
      new Promise((resolve) => {
        const check = () => (el.getBoundingClientRect().right <= window.innerWidth ? resolve() : setTimeout(check, 50));
        check();
      }),
  );
}

const row = '.jp-DisttrainPanel tr.jp-Disttrain-job[data-job-id="local/notify-hang"]';
const detail = '.jp-DisttrainPanel tr.jp-Disttrain-detail[data-job-id="local/notify-hang"]';

// The notes the jobs panel shows in the hanging job's open details ("stop requested", ...).
async function notes() {
  return page.locator(`${detail} .jp-Disttrain-note`).allTextContents();
}

async function currentTab() {
  return page
    .locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel")
    .first()
    .textContent();
}

await runScenario({ page, result, close }, outDir, async () => {
  await openNotebook(page, `${baseUrl}/lab/tree/${notebook}`);
  // every toast that ever shows, in order (a toast closes itself after a while)
  await page.evaluate(() => {
    window.__distrainToasts = [];
    const seen = new WeakSet();
    new MutationObserver(() => {
      for (const el of document.querySelectorAll(".Toastify__toast")) {
        if (!seen.has(el)) {
          seen.add(el);
          window.__distrainToasts.push(el.textContent);
        }
      }
    }).observe(document.body, { childList: true, subtree: true });
  });
  result.sidebarVisible = await page.locator(".jp-DisttrainPanel").isVisible();

  await waitForPrompt(await runCell(0));

  // a job that succeeds: a success toast with both buttons; "Show logs" opens its logs
  await runCell(1);
  await toast("Training job notify-ok").waitFor({ timeout: JOB_TIMEOUT });
  result.ok = await describe("Training job notify-ok");
  await settled("Training job notify-ok");
  await page.screenshot({ path: path.join(outDir, "notify-succeeded.png") });
  await toast("Training job notify-ok").getByRole("button", { name: "Show logs" }).click();
  await page.locator('.jp-DisttrainLogs[data-job-id="local/notify-ok"]').waitFor({ timeout: 30_000 });
  result.afterShowLogs = await currentTab();

  // a job that fails, started from the notebook again: an error toast that stays
  await page.locator("#jp-main-dock-panel .lm-TabBar-tab", { hasText: notebook }).click();
  await runCell(2);
  await toast("Training job notify-fail").waitFor({ timeout: JOB_TIMEOUT });
  result.failed = await describe("Training job notify-fail");
  await settled("Training job notify-fail");
  await page.screenshot({ path: path.join(outDir, "notify-failed.png") });
  // with the logs in front, "Open notebook" brings the notebook back
  await page.locator("#jp-main-dock-panel .lm-TabBar-tab", { hasText: "Logs: notify-ok" }).click();
  result.beforeOpenNotebook = await currentTab();
  await toast("Training job notify-fail").getByRole("button", { name: "Open notebook" }).click();
  await page.waitForFunction(
    (name) =>
      document.querySelector("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel")?.textContent === name,
    notebook,
    { timeout: 30_000 },
  );
  result.afterOpenNotebook = await currentTab();

  // a few more polls: no job end is announced twice
  await page.waitForTimeout(12_000);
  result.toasts = await page.evaluate(() => window.__distrainToasts);

  // a job that hangs: its "hung" notice, then Stop from the jobs panel; the notice goes
  await page.locator(".jp-Disttrain-status").click();
  await page.locator(".jp-DisttrainPanel").waitFor({ state: "visible", timeout: 30_000 });
  await runCell(3);
  await toast("Training job notify-hang hung").waitFor({ timeout: JOB_TIMEOUT });
  result.hungToast = await describe("Training job notify-hang hung");
  await page.locator(row).click();
  const stop = page.locator(`${detail} button[data-action="stop"]`);
  await stop.waitFor({ timeout: 30_000 });
  result.hangStopEnabled = await stop.isEnabled();
  await stop.click();
  await page.locator(`${row}[data-state="Stopped"]`).waitFor({ timeout: 60_000 });
  const stoppedToast = page.locator(".Toastify__toast").filter({ hasText: /notify-hang (stopped|.*Stopped)/ });
  await stoppedToast.first().waitFor({ timeout: 30_000 });
  // the panel's next polls take the notice away (up to 30 s; then the test judges)
  await toast("Training job notify-hang hung").first().waitFor({ state: "detached", timeout: 30_000 }).catch(() => {});
  result.afterStop = {
    hungToasts: await toast("Training job notify-hang hung").count(),
    notes: await notes(),
  };
  await page.screenshot({ path: path.join(outDir, "notify-hang-stopped.png") });

  // the same --name again: the new run says nothing of the old run's stop
  await runCell(4);
  await page.locator(`${row}[data-state="Running"]`).waitFor({ timeout: JOB_TIMEOUT });
  await page.locator(`${detail} button[data-action="stop"]`).waitFor({ timeout: 30_000 });
  await page.waitForTimeout(2_000); // the detail read again for the new run
  result.rerun = {
    state: await page.locator(row).getAttribute("data-state"),
    notes: await notes(),
    text: await page.locator(detail).innerText(),
    hungToasts: await toast("Training job notify-hang hung").count(),
  };
  await page.screenshot({ path: path.join(outDir, "notify-hang-rerun.png") });
  await page.locator(`${row}[data-state="Succeeded"]`).waitFor({ timeout: JOB_TIMEOUT });
  result.rerunEnded = { notes: await notes(), text: await page.locator(detail).innerText() };
}, async () => {
  result.toasts = await page.evaluate(() => window.__distrainToasts);
});
