"""Operations that prepare a DGX Spark, one module per thing they manage."""
