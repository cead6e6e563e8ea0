// jsdom has no DragEvent, which @lumino/dragdrop subclasses when it loads.
const g = globalThis as unknown as { DragEvent?: unknown; MouseEvent: typeof MouseEvent };
if (g.DragEvent === undefined) {
  g.DragEvent = class DragEvent extends g.MouseEvent {};
}

export {};
