// Sizing a widget within the vertical split it lies in (Notebook 7's area below the notebook).

import { SplitPanel, Widget } from '@lumino/widgets';

/**
 * Give `widget` a `share` of the nearest vertical split it lies in when the
 * split shows it at (almost) no height (Notebook 7's down area opens so).
 */
export function reveal(widget: Widget, share = 0.4): void {
  let child: Widget = widget;
  for (let parent = widget.parent; parent !== null; child = parent, parent = parent.parent) {
    if (parent instanceof SplitPanel && parent.orientation === 'vertical') {
      const index = parent.widgets.indexOf(child);
      const sizes = parent.relativeSizes();
      if (index >= 0 && !(sizes[index] >= 0.1)) {
        const rest = sizes.reduce((sum, size, i) => (i === index ? sum : sum + size), 0) || 1;
        parent.setRelativeSizes(sizes.map((size, i) => (i === index ? share : (size / rest) * (1 - share))));
      }
      return;
    }
  }
}

/** The share of a split `total` px tall that shows `content` px: at least `min` px, at most `max`. */
export function fittedShare(content: number, total: number, min = 90, max = 0.4): number {
  if (!(total > 0)) {
    return max;
  }
  return Math.min(max, Math.max(min, content) / total);
}

/**
 * Size `widget`'s part of the nearest vertical split to show `content` px of it
 * (bounded by :func:`fittedShare`), the split's other parts keeping their proportions.
 */
export function fit(widget: Widget, content: number): void {
  let child: Widget = widget;
  for (let parent = widget.parent; parent !== null; child = parent, parent = parent.parent) {
    if (parent instanceof SplitPanel && parent.orientation === 'vertical') {
      const index = parent.widgets.indexOf(child);
      if (index < 0) {
        return;
      }
      // the part holds more than the widget (a tab bar): that is shown too
      const around = Math.max(0, child.node.offsetHeight - widget.node.offsetHeight);
      const share = fittedShare(content + around, parent.node.clientHeight);
      const sizes = parent.relativeSizes();
      const rest = sizes.reduce((sum, size, i) => (i === index ? sum : sum + size), 0) || 1;
      parent.setRelativeSizes(sizes.map((size, i) => (i === index ? share : (size / rest) * (1 - share))));
      return;
    }
  }
}
