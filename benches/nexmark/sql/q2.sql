-- q2 selection (Nexmark's reference SQL as is).
SELECT auction, price FROM bid WHERE auction % 123 = 0
