// The status bar item: how many jobs run; a click opens the sidebar.

import { Widget } from '@lumino/widgets';

import { JobsModel, statusText } from './model';

export class JobsStatus extends Widget {
  constructor(
    private readonly model: JobsModel,
    onClick: () => void
  ) {
    super();
    this.addClass('jp-Disttrain-status');
    this.node.title = 'Distributed Training: open the jobs panel';
    this.node.addEventListener('click', onClick);
    this.unsubscribe = model.subscribe(() => this.render());
    this.render();
  }

  private unsubscribe: () => void;

  dispose(): void {
    this.unsubscribe();
    super.dispose();
  }

  render(): void {
    const running = this.model.running;
    const hung = this.model.jobs.filter(job => job.state === 'Hung').length;
    this.node.dataset.running = String(running);
    this.node.dataset.hung = String(hung);
    this.node.textContent = statusText(running, hung);
  }
}
