"""Transactions (KIP-98, with KIP-890's server-side defense): the transaction coordinator, its log
`__transaction_state`, the markers it has partition leaders write, and the partition leaders'
verification of transactional writes."""
