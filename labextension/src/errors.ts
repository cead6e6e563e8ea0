// The failing ranks' own errors as the jobs panel lists them: each distinct error once.

import { IErrorRow } from './types';

/** One listed error: the ranks that raised it and what they raised. */
export interface IErrorLine {
  ranks: number[];
  /** "rank 1", "ranks 0-2, 5", "all 4 ranks" (or "job" for an error of no rank). */
  where: string;
  text: string;
}

/** "0-3", "0, 2, 5-7": sorted ranks as ranges. */
export function rankRanges(ranks: number[]): string {
  const sorted = [...new Set(ranks)].sort((a, b) => a - b);
  const parts: string[] = [];
  let start = 0;
  for (let i = 1; i <= sorted.length; i++) {
    if (i === sorted.length || sorted[i] !== sorted[i - 1] + 1) {
      const [first, last] = [sorted[start], sorted[i - 1]];
      parts.push(first === last ? String(first) : `${first}-${last}`);
      start = i;
    }
  }
  return parts.join(', ');
}

function whereOf(ranks: number[], worldSize: number): string {
  if (ranks.length === 0) {
    return 'job';
  }
  if (ranks.length === 1) {
    return `rank ${ranks[0]}`;
  }
  return ranks.length === worldSize ? `all ${worldSize} ranks` : `ranks ${rankRanges(ranks)}`;
}

/**
 * The errors of `errors` that are not a lost peer's, each distinct one (type and message) once
 * with every rank that raised it, in the order first raised; an error the job's `reason`
 * already says whole (it starts with the same ranks and holds the message, as "rank 1:
 * ValueError: ..." or "all 4 ranks: train.py: error: ...") is left out.
 */
export function ownErrors(errors: IErrorRow[], reason: string, worldSize: number): IErrorLine[] {
  const groups = new Map<string, { ranks: number[]; text: string; message: string }>();
  for (const error of errors) {
    if (error.peer) {
      continue;
    }
    const text = `${error.type}: ${error.message}`;
    const group = groups.get(text) ?? { ranks: [], text, message: error.message };
    if (error.rank !== null && !group.ranks.includes(error.rank)) {
      group.ranks.push(error.rank);
    }
    groups.set(text, group);
  }
  const lines: IErrorLine[] = [];
  for (const group of groups.values()) {
    const ranks = [...group.ranks].sort((a, b) => a - b);
    const where = whereOf(ranks, worldSize);
    if (reason.startsWith(`${where}: `) && reason.includes(group.message)) {
      continue;
    }
    lines.push({ ranks, where, text: group.text });
  }
  return lines;
}
