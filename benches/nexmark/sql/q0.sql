-- q0 passthrough (Nexmark's reference SQL as is).
SELECT auction, bidder, price, date_time, extra FROM bid
