"""The Hugging Face environment that works on a Spark, and complete, verified model folders."""
