"""A Lightning job's dashboard in a real browser: curves and progress with no report() call.

A notebook runs a 2x2 job whose LightningModule only calls ``self.log``; from the
DOM, the four ranks end Succeeded at step 16, the plot has a line per rank and
the mean with a point per step (``log_every_n_steps=1``: every step is one
Lightning's loggers get, so autolog sends each). The screenshot lands in
``test-output/browser-autolog/`` (``make readme-pictures`` copies it into ``docs/``).
"""

from __future__ import annotations

import pytest

from .conftest import OUTPUT, Lab
from .harness import run_harness, write_notebook

SHOTS = OUTPUT.parent / "browser-autolog"
CELLS = [
    "%load_ext jupyter_disttrain",
    """%%distrain --nodes 2 --nproc 2 --name browser-pl
import torch
import lightning.pytorch as pl

class Regressor(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)

torch.manual_seed(0)
x = torch.randn(128, 8)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)),
                                     batch_size=4)
trainer = pl.Trainer(max_epochs=2, accelerator="cpu", strategy="ddp", devices=2, num_nodes=2,
                     enable_progress_bar=False, logger=False, enable_model_summary=False,
                     enable_checkpointing=False, log_every_n_steps=1)
trainer.fit(Regressor(), loader)""",
]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_lightning_jobs_curves_in_jupyterlab(lab: Lab) -> None:
    notebook = write_notebook(lab.root, "autolog.ipynb", CELLS)
    result = run_harness("autolog.mjs", lab, notebook, SHOTS)
    assert [(r["rank"], r["state"], r["step"]) for r in result["rows"]] == [
        (rank, "Succeeded", "16") for rank in range(4)
    ], result["rows"]
    points = [t["points"] for t in result["traces"]]
    assert len(points) == 5 and min(points) >= 16, points  # 4 ranks and the mean
    assert "train_loss" in result["text"], result["text"]
    errors = [e for e in result["console"] if e.startswith("pageerror")]
    assert not errors, errors
    assert (SHOTS / "lightning-job.png").stat().st_size > 10_000
