"""Long work on the Spark: image pulls and model downloads as systemd jobs, watched from the laptop."""
