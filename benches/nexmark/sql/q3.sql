-- q3 local item suggestion (Nexmark's reference SQL as is, with this generator's
-- snake_case names). An unbounded inner join, as the DSL version: every auction of
-- category 10 and every person in OR, ID or CA is kept (an auction may come before
-- its seller). The WHERE conditions on one table filter it before the join.
SELECT P.name, P.city, P.state, A.id
FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')
