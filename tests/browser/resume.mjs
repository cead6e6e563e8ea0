// The checkpoint browser's "Resume a job from here", as a user sees it: the row of `step` is
// selected, the button clicked, and the cell the lab extension puts right below the browser's
// cell is read (its source, whether it is the active cell in command mode) with what the
// browser then says. Works in JupyterLab 4 and Notebook 7 (the same notebook widget).

const CELLS = ".jp-Notebook .jp-Cell";

export async function resumeBelow(page, browser, step) {
  const cellOf = (sel) => [...document.querySelectorAll(".jp-Notebook .jp-Cell")].findIndex((c) => c.querySelector(sel));
  const index = await page.evaluate(cellOf, browser);
  const before = await page.locator(CELLS).count();
  await page.locator(`${browser} .distrain-ckpt-table tbody tr[data-step="${step}"]`).click();
  await page.locator(`${browser} .distrain-ckpt-detail`).filter({ hasText: `step ${step}` }).waitFor({ timeout: 30_000 });
  await page.locator(`${browser} button`, { hasText: "Resume a job from here" }).click();
  // said once the front end answered that it inserted the cell (an earlier resume said another step)
  await page.locator(browser).filter({ hasText: `resumes from step ${step}:` }).waitFor({ timeout: 30_000 });
  return page.evaluate(
    ({ browser, index, before, step }) => {
      const cells = [...document.querySelectorAll(".jp-Notebook .jp-Cell")];
      const below = cells[index + 1];
      const lines = [...(below?.querySelectorAll(".cm-line") ?? [])].map((l) => l.textContent);
      return {
        index,
        before,
        after: cells.length,
        source: lines.join("\n"),
        active: Boolean(below?.classList.contains("jp-mod-active")),
        commandMode: (() => {
          const notebook = below?.closest(".jp-Notebook");
          if (notebook?.classList.contains("jp-mod-commandMode")) return "command";
          return notebook?.classList.contains("jp-mod-editMode") ? "edit" : null;
        })(),
        activeCells: cells.filter((c) => c.classList.contains("jp-mod-active")).length,
        said: [...document.querySelector(browser).querySelectorAll(".widget-html-content")]
          .map((el) => el.textContent)
          .find((t) => t.includes(`resumes from step ${step}:`)) ?? null,
      };
    },
    { browser, index, before, step },
  );
}
