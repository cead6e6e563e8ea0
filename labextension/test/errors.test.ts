// The jobs panel's list of the ranks' own errors: each distinct error once.

import { ownErrors, rankRanges } from '../src/errors';
import { IErrorRow } from '../src/types';

const error = (rank: number | null, type: string, message: string, peer = ''): IErrorRow => ({
  rank, t: 1, type, message, traceback: '', peer
});

const ARGPARSE = 'train.py: error: the following arguments are required: total_epochs, save_every';

describe('ownErrors', () => {
  it('says an error every rank raised once, and not at all when the reason says it', () => {
    const errors = [0, 1, 2, 3].map(rank => error(rank, 'SystemExit', ARGPARSE));
    expect(ownErrors(errors, `all 4 ranks: ${ARGPARSE}`, 4)).toEqual([]);
    expect(ownErrors(errors, 'the job failed', 4)).toEqual([
      { ranks: [0, 1, 2, 3], where: 'all 4 ranks', text: `SystemExit: ${ARGPARSE}` }
    ]);
  });

  it('leaves the cause the reason names out, keeps the others, never a lost peer', () => {
    const errors = [
      error(1, 'ValueError', 'bad batch at step 5'),
      error(0, 'RuntimeError', 'Connection closed by peer', 'lost its peer (rank 1 failed)'),
      error(3, 'KeyError', "'label'"),
      error(2, 'KeyError', "'label'")
    ];
    const reason = 'rank 1: ValueError: bad batch at step 5; 3 ranks stopped as a consequence';
    expect(ownErrors(errors, reason, 4)).toEqual([{ ranks: [2, 3], where: 'ranks 2-3', text: "KeyError: 'label'" }]);
    expect(ownErrors(errors, '', 4).map(e => e.where)).toEqual(['rank 1', 'ranks 2-3']);
  });

  it('writes ranks as ranges', () => {
    expect(rankRanges([5, 0, 2, 6, 7, 1])).toBe('0-2, 5-7');
    expect(rankRanges([3])).toBe('3');
    expect(rankRanges([])).toBe('');
  });
});
