// The text of a page part whose contrast with its background is under WCAG's 4.5:1 (run in
// the page through page.evaluate). A text's background is every background under it composed
// from the document down; an element's opacity (its ancestors' too) fades its text into it.
// Text over a bar drawn beside it (the progress bar) is checked against that bar too.
//
//   await page.evaluate(lowContrast, { sel: ".distrain-dashboard", skip: ".js-plotly-plot" })

export function lowContrast({ sel, skip, least = 4.5 }) {
  const parse = (c) => {
    const m = /rgba?\(([^)]+)\)/.exec(c || "");
    if (!m) return null;
    const p = m[1].split(/[\s,/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const lum = ([r, g, b]) => {
    const f = (v) => ((v /= 255) <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const over = (top, under) => [0, 1, 2].map((i) => top[i] * top[3] + under[i] * (1 - top[3])).concat(1);
  const backgroundOf = (el) => {
    const chain = [];
    for (let e = el; e; e = e.parentElement) chain.push(e);
    let bg = [255, 255, 255, 1];
    for (const e of chain.reverse()) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c[3] > 0) bg = over(c, bg);
    }
    return bg;
  };
  const ratio = (fg, bg) => {
    const [a, b] = [lum(fg), lum(bg)];
    return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  };
  const found = [];
  let checked = 0;
  for (const root of document.querySelectorAll(sel)) {
    for (const el of root.querySelectorAll("*")) {
      if ((skip && el.closest(skip)) || el.closest("[disabled], option, select, input, textarea")) continue;
      const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
      const box = el.getBoundingClientRect();
      if (!own || box.width === 0 || box.height === 0) continue;
      const style = getComputedStyle(el);
      if (style.visibility === "hidden") continue;
      let bg = backgroundOf(el);
      const grounds = [bg];
      const bar = el.classList.contains("distrain-progress-text") && el.parentElement?.querySelector(".distrain-progress-bar");
      if (bar && bar.getBoundingClientRect().width > 0) grounds.push(over(parse(getComputedStyle(bar).backgroundColor), bg));
      let opacity = 1;
      for (let e = el; e && e !== document.body; e = e.parentElement) opacity *= Number(getComputedStyle(e).opacity);
      checked += 1;
      for (const ground of grounds) {
        let fg = over(parse(style.color), ground);
        if (opacity < 1) fg = over([...fg.slice(0, 3), opacity], ground);
        const r = ratio(fg, ground);
        if (r < least) {
          found.push({
            text: el.textContent.trim().slice(0, 50), cls: String(el.className).slice(0, 60),
            ratio: Math.round(r * 100) / 100, color: style.color,
            background: `rgb(${ground.slice(0, 3).map(Math.round).join(", ")})`,
          });
        }
      }
    }
  }
  return { checked, found };
}
