"""What the warehouse keeps for BI: the indexes a bulk load leaves out until it ends
(``indexes``) and the reads of the BI views (``summaries``)."""
