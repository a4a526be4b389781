"""Run records (write and read), metrics, comparison tables, plots and the HTML report. Needs no root."""
